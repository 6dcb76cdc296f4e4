"""The ``silo_sample`` unit's strategies, one module each, one line each in ``SILO_STRATEGIES``
(docs/mrmtl.md §5). A silo plan's ``method`` names the strategy that runs it (the plan's
DP-SGD passes per round are that method's)."""

from trainer.strategies.silo.base import SiloStrategy
from trainer.strategies.silo.ditto import Ditto
from trainer.strategies.silo.fedavg import FedAvg
from trainer.strategies.silo.finetune import Finetune
from trainer.strategies.silo.ifca_mrmtl import IfcaMRMTL
from trainer.strategies.silo.local import Local
from trainer.strategies.silo.mrmtl import MRMTL

SILO_STRATEGIES: dict[str, type[SiloStrategy]] = {
    cls.name: cls for cls in (MRMTL, Local, FedAvg, Finetune, Ditto, IfcaMRMTL)
}

__all__ = ["SILO_STRATEGIES", "SiloStrategy"]
