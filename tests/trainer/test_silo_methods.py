"""The silo methods are one list, ``planner.units.silo_sample.SiloMethod``: the planner's
DP-SGD passes per method (``OVERHEAD``), the trainer's strategies that run them
(``trainer.units.silo.strategies.STRATEGIES``: a silo plan's method names its strategy) and the unit registry's
methods each have exactly its names, in its order, so a method the planner plans is one the trainer runs
(issue 28: three lists, no test held them equal)."""

from __future__ import annotations

from planner.units import UNITS
from planner.units.silo_sample import OVERHEAD, SILO_METHODS
from trainer.units.silo.strategies import STRATEGIES as SILO_STRATEGIES


def test_the_silo_methods_are_one_list() -> None:
    assert tuple(OVERHEAD) == SILO_METHODS
    assert tuple(SILO_STRATEGIES) == SILO_METHODS
    assert tuple(UNITS["silo_sample"].methods) == SILO_METHODS
