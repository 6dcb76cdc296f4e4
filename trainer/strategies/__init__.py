"""Federated algorithms as strategies (docs/trainer.md §Strategies)."""

from trainer.strategies.base import Population, RoundContext, Strategy, poisson_sample
from trainer.strategies.plan import PlanStrategy

__all__ = ["PlanStrategy", "Population", "RoundContext", "Strategy", "poisson_sample"]
