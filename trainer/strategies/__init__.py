"""Federated algorithms as strategies (docs/trainer.md §Strategies), selected by name
from the registry (``trainer.strategies.registry.STRATEGIES``)."""

from trainer.strategies.base import Population, RoundContext, Strategy, StrategySpec, poisson_sample
from trainer.strategies.fedhdp import FedHDPStrategy
from trainer.strategies.pfa import PFAStrategy
from trainer.strategies.plan import PlanStrategy
from trainer.strategies.registry import STRATEGIES, build_strategy, strategy_spec

__all__ = [
    "STRATEGIES",
    "FedHDPStrategy",
    "PFAStrategy",
    "PlanStrategy",
    "Population",
    "RoundContext",
    "Strategy",
    "StrategySpec",
    "build_strategy",
    "poisson_sample",
    "strategy_spec",
]
