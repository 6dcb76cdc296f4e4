"""The client unit's training strategies, one module each, one line each in
``STRATEGY_SPECS`` (docs/trainer.md §Strategies). To add one: write its module here with
the class and ``SPEC = StrategySpec(...)``, and add its line below."""

from trainer.strategies.base import StrategySpec
from trainer.units.client.strategies import fedhdp, pfa, plan
from trainer.units.client.strategies.fedhdp import FedHDPStrategy
from trainer.units.client.strategies.pfa import PFAStrategy
from trainer.units.client.strategies.plan import PlanStrategy

STRATEGY_SPECS: dict[str, StrategySpec] = {spec.name: spec for spec in (plan.SPEC, pfa.SPEC, fedhdp.SPEC)}

__all__ = ["STRATEGY_SPECS", "FedHDPStrategy", "PFAStrategy", "PlanStrategy"]
