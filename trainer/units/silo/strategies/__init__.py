"""The ``silo_sample`` unit's strategies, one module each, one line each in ``STRATEGIES``
(docs/mrmtl.md §5). A silo plan's ``method`` names the strategy that runs it (the plan's
DP-SGD passes per round are that method's): its names are the planner's
``planner.units.silo_sample.SILO_METHODS``, which a test holds equal."""

from trainer.units.silo.strategies.base import SiloStrategy
from trainer.units.silo.strategies.ditto import Ditto
from trainer.units.silo.strategies.fedavg import FedAvg
from trainer.units.silo.strategies.finetune import Finetune
from trainer.units.silo.strategies.ifca_mrmtl import IfcaMRMTL
from trainer.units.silo.strategies.local import Local
from trainer.units.silo.strategies.mrmtl import MRMTL

STRATEGIES: dict[str, type[SiloStrategy]] = {
    cls.name: cls for cls in (MRMTL, Local, FedAvg, Finetune, Ditto, IfcaMRMTL)
}

__all__ = ["STRATEGIES", "SiloStrategy"]
