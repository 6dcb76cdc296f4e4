"""Privacy units: one module per unit, one line per unit in ``UNITS``.

A plan's ``privacy_unit`` (schema version 2) selects the models that read its scenario
and plan, its ledger, its verifier and its mechanism, which the trainer implements
(docs/architecture.md §Privacy units). To add a unit: write ``planner/units/NAME.py``
with its scenario and plan models (each with ``privacy_unit: Literal["NAME"]``), its
planner, ledger and verifier and ``UNIT = PrivacyUnit(...)``; add its line below; and
register the trainer unit that runs the mechanism it names in ``trainer/units/registry.py``.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import BaseModel, Discriminator, Tag, TypeAdapter

from accounting.errors import InvalidInputError
from planner.schema import Plan, PlanDocument, check_scenario_fixed, current_plan_data, require_client_plan
from planner.service_api import LedgerOut
from planner.units import client, metric_local, silo_sample
from planner.units.base import PrivacyUnit

UNITS: dict[str, PrivacyUnit] = {unit.name: unit for unit in (client.UNIT, metric_local.UNIT, silo_sample.UNIT)}
# the unit of a scenario or plan document that names none (every document before units)
DEFAULT_UNIT = client.UNIT.name
# every unit's planning methods, each once, in registry order: what a plan request may name
PLANNING_METHODS: tuple[str, ...] = tuple(dict.fromkeys(m for unit in UNITS.values() for m in unit.methods))
if TYPE_CHECKING:
    PlanningMethod = str
    ScenarioDocument = Any
else:
    PlanningMethod = Literal[PLANNING_METHODS]


def scenario_unit_name(value: Any) -> str:
    """The unit a scenario (a JSON object or a model) names; absent: ``DEFAULT_UNIT``.
    The tag of ``ScenarioDocument``; a name the registry lacks is returned as it is."""
    unit = value.get("privacy_unit", DEFAULT_UNIT) if isinstance(value, dict) else getattr(value, "privacy_unit", DEFAULT_UNIT)
    return unit if isinstance(unit, str) else repr(unit)


if not TYPE_CHECKING:
    # a scenario of any registered unit, told apart by its privacy_unit (pydantic names
    # the unit as the tag in an error's location: ``scenario.silo_sample.silos``)
    ScenarioDocument = Annotated[
        Union[tuple(Annotated[unit.scenario_model, Tag(unit.name)] for unit in UNITS.values())],  # noqa: UP007
        Discriminator(scenario_unit_name),
    ]


def privacy_unit(name: Any) -> PrivacyUnit:
    """The registered unit ``name``, or ``InvalidInputError("privacy_unit")`` naming it."""
    unit = UNITS.get(name) if isinstance(name, str) else None
    if unit is None:
        raise InvalidInputError(
            "privacy_unit", f"unknown privacy unit {name!r} (this gdpfed knows {', '.join(map(repr, UNITS))})"
        )
    return unit


def ledger_model(unit: PrivacyUnit) -> type[BaseModel]:
    """The body of the service's ledger of ``unit``'s plans (client groups: ``LedgerOut``)."""
    return unit.ledger_model or LedgerOut


def _ledger_unit(value: Any) -> str:
    unit = value.get("privacy_unit") if isinstance(value, dict) else getattr(value, "privacy_unit", None)
    return unit if isinstance(unit, str) else DEFAULT_UNIT


if not TYPE_CHECKING:
    # the service's ledger of a plan of any unit, told apart by its privacy_unit
    LedgerDocument = Annotated[
        Union[tuple(Annotated[ledger_model(unit), Tag(unit.name)] for unit in UNITS.values())],  # noqa: UP007
        Discriminator(_ledger_unit),
    ]
else:
    LedgerDocument = Any


@functools.cache
def _ledger_adapter() -> TypeAdapter[Any]:
    # start-up time: built by the first ledger read, not by every import (`gdpfed plan`)
    return TypeAdapter(LedgerDocument)


def parse_ledger(data: Any) -> BaseModel:
    """A ledger body the service answered (``GET /v1/plans/{id}/ledger``), read as its unit's
    model (``LedgerOut``, ``SiloLedgerOut``, ``MetricLedgerOut``; docs/service.md §Clients)."""
    result: BaseModel = _ledger_adapter().validate_python(data)
    return result


def unit_of(plan: PlanDocument) -> PrivacyUnit:
    return privacy_unit(plan.privacy_unit)


def load_scenario_document(data: dict[str, Any]) -> BaseModel:
    """A scenario of the unit its ``privacy_unit`` names (absent: ``client``), validated."""
    return privacy_unit(data.get("privacy_unit", DEFAULT_UNIT)).scenario_model.model_validate(data)


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
    "DEFAULT_UNIT", "LedgerDocument", "PLANNING_METHODS", "UNITS", "PlanningMethod", "PrivacyUnit", "ScenarioDocument",
    "ledger_model", "load_plan", "load_plan_document", "load_scenario_document", "make_plan", "parse_ledger", "privacy_unit",
    "scenario_unit_name", "spent", "unit_of", "verify",
]
