"""Privacy units: one module per unit, one line per unit in ``UNITS``.

A plan's ``privacy_unit`` (schema version 2) selects the models that read its scenario
and plan, its ledger, its verifier and its mechanism, which the trainer implements
(docs/architecture.md §Privacy units). To add a unit: write ``planner/units/NAME.py``
with its scenario and plan models (each with ``privacy_unit: Literal["NAME"]``), its
planner, ledger and verifier and ``UNIT = PrivacyUnit(...)``; add its line below; and
register the trainer's implementation of the mechanism it names in ``trainer/run/mechanisms.py``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from accounting.errors import InvalidInputError
from planner.schema import Plan, PlanDocument, check_scenario_fixed, current_plan_data, require_client_plan
from planner.units import client, metric_local, silo_sample
from planner.units.base import PrivacyUnit

UNITS: dict[str, PrivacyUnit] = {unit.name: unit for unit in (client.UNIT, metric_local.UNIT, silo_sample.UNIT)}


def privacy_unit(name: Any) -> PrivacyUnit:
    """The registered unit ``name``, or ``InvalidInputError("privacy_unit")`` naming it."""
    unit = UNITS.get(name) if isinstance(name, str) else None
    if unit is None:
        raise InvalidInputError(
            "privacy_unit", f"unknown privacy unit {name!r} (this gdpfed knows {', '.join(map(repr, UNITS))})"
        )
    return unit


def unit_of(plan: PlanDocument) -> PrivacyUnit:
    return privacy_unit(plan.privacy_unit)


def load_scenario_document(data: dict[str, Any]) -> BaseModel:
    """A scenario of the unit its ``privacy_unit`` names (absent: ``client``), validated."""
    return privacy_unit(data.get("privacy_unit", "client")).scenario_model.model_validate(data)


def load_plan_document(data: Any) -> PlanDocument:
    """Read a plan document of any known schema version and privacy unit, or refuse it
    clearly (``InvalidInputError`` naming the version or the unit; docs/architecture.md
    §Privacy units)."""
    data = current_plan_data(data)
    plan = privacy_unit(data["privacy_unit"]).plan_model.model_validate(data)
    check_scenario_fixed(plan)
    return plan


def load_plan(data: Any) -> Plan:
    """A client-level plan document (any known schema version), or a clear refusal: a
    plan of another privacy unit is named, never misread as a client plan."""
    return require_client_plan(load_plan_document(data))


def make_plan(scenario: BaseModel, method: str | None = None) -> PlanDocument:
    """Plan ``scenario`` with its unit's planner (``method`` None: the unit's default)."""
    unit = privacy_unit(getattr(scenario, "privacy_unit", None))
    if method is not None and method not in unit.methods:
        raise InvalidInputError(
            "method", f"{unit.name} plans take one of {', '.join(unit.methods)}, got {method!r}"
        )
    return unit.make_plan(scenario, method or unit.default_method)


def verify(plan: PlanDocument) -> None:
    """The plan's unit's verifier (``InvalidInputError`` unless safe to execute)."""
    unit_of(plan).verify(plan)


def spent(plan: PlanDocument, rounds_run: int) -> dict[str, float | None]:
    """The ledger of the plan's unit: each protected entity's figure after ``rounds_run``."""
    return unit_of(plan).spent(plan, rounds_run)


__all__ = [
    "UNITS", "PrivacyUnit", "load_plan", "load_plan_document", "load_scenario_document", "make_plan", "privacy_unit",
    "spent", "unit_of", "verify",
]
