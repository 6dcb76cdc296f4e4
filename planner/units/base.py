"""What a privacy unit is: whom a plan protects, and everything that changes with it.

docs/architecture.md §Privacy units. A unit bundles the scenario it plans from, the plan
document it produces, the ledger that says what its rounds spend, the verifier the
trainer runs before round 0 and the name of the training mechanism that executes it.
Figures of different units are different privacy notions (client-level DP, silo
sample-level DP, metric privacy): ``notion`` labels them wherever they are shown, and
no code adds or compares figures across units.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from planner.schema import PlanDocument

# plan -> rounds run -> the figure of record per protected entity (group, silo or client)
# in the unit's own notion; None where the entity has no guarantee (opted out).
SpentFn = Callable[[Any, int], dict[str, float | None]]


@dataclass(frozen=True)
class PrivacyUnit:
    """One entry of the privacy-unit registry (``planner.units.UNITS``).

    ``scenario_model`` and ``plan_model`` declare ``privacy_unit: Literal[name]`` (a test
    checks it); ``plan_model.scenario_fixed()`` lists the plan's fields its scenario fixes,
    which every plan read and ``verify`` refuse to see differ
    (``planner.schema.check_scenario_fixed``, docs/ledger.md §5). ``make_plan(scenario, method)`` plans a scenario of this unit;
    ``methods`` are the names it accepts (``default_method`` when none is given).
    ``describe(plan)`` is the text ``gdpfed plan`` prints. ``verify(plan)`` raises ``InvalidInputError`` unless the plan is consistent and
    within every budget (the trainer runs it on every plan, whatever its origin).
    ``spent(plan, rounds_run)`` is the ledger: each protected entity's figure after that
    many rounds, never optimistic. ``mechanism`` names the trainer's mechanism
    (``trainer.units.registry``: the unit that executes such plans).
    """

    name: str
    notion: str
    scenario_model: type[BaseModel]
    plan_model: type[PlanDocument]
    methods: tuple[str, ...]
    default_method: str
    make_plan: Callable[[Any, str], PlanDocument]
    describe: Callable[[Any], str]
    verify: Callable[[Any], None]
    spent: SpentFn
    mechanism: str
