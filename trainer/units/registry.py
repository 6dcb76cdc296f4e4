"""The trainer's unit registry: one line per privacy unit (docs/trainer.md §Layout).

``gdpfed train``, the run loop and the experiment runner reach a unit only through here
(``unit_for(plan)``); a plan whose unit this trainer has no entry for is refused by name
before anything is written. To add a unit: write ``trainer/units/<unit>/`` with its
``unit.py`` defining ``UNIT`` (torch-free) (``trainer.run.unit.TrainingUnit``) and add its line below.
"""

from __future__ import annotations

from accounting.errors import InvalidInputError
from planner.schema import PlanDocument
from planner.units import unit_of
from trainer.run.unit import TrainingUnit
from trainer.units.client import unit as client
from trainer.units.metric import unit as metric
from trainer.units.silo import unit as silo

UNITS: dict[str, TrainingUnit] = {unit.name: unit for unit in (client.UNIT, metric.UNIT, silo.UNIT)}


def training_unit(name: str) -> TrainingUnit:
    """The registered unit ``name`` (``KeyError`` for an unknown one: callers name the planner's units)."""
    return UNITS[name]


def unit_for(plan: PlanDocument) -> TrainingUnit:
    """The unit that trains ``plan``, or ``InvalidInputError("privacy_unit")`` naming the
    plan's unit and the mechanism it needs."""
    planned = unit_of(plan)
    # by mechanism, as the planner's unit names it: a unit naming another's mechanism meets
    # that mechanism's own refusal of its plans
    unit = next((u for u in UNITS.values() if u.mechanism == planned.mechanism), None)
    if unit is None:
        raise InvalidInputError(
            "privacy_unit",
            f"{planned.name} plans ({planned.notion}) need the {planned.mechanism!r} training mechanism, "
            f"which this trainer does not have (it has {', '.join(u.mechanism for u in UNITS.values())})",
        )
    return unit
