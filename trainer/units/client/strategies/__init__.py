"""The client unit's training strategies, one module each (docs/trainer.md §Strategies)."""

from trainer.units.client.strategies.fedhdp import FedHDPStrategy
from trainer.units.client.strategies.pfa import PFAStrategy
from trainer.units.client.strategies.plan import PlanStrategy

__all__ = ["FedHDPStrategy", "PFAStrategy", "PlanStrategy"]
