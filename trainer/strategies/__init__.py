"""Federated algorithms as strategies (docs/trainer.md §Strategies): the interface every
unit's strategies implement. The strategies themselves live with their privacy unit
(``trainer/units/<unit>/strategies``), selected by name from the registry
(``trainer.units.strategies.STRATEGIES``)."""

from trainer.strategies.base import Population, RoundContext, Strategy, StrategySpec, poisson_sample

__all__ = ["Population", "RoundContext", "Strategy", "StrategySpec", "poisson_sample"]
