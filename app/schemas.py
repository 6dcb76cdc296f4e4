"""Request and response bodies of the HTTP API (docs/service.md §Endpoints).

Scenario, plan and change documents are the planner's own models (``planner.schema``),
and accounting requests are ``accounting.requests``: the CLI and HTTP share one
validation. This module adds only what is specific to the service (ids, pages, keys,
populations, the ledger). The bodies the service's own clients send and read (round
reports, ledgers, the key's identity, errors) are ``planner.service_api``'s, re-exported
here: the trainer's reporting client uses the same classes (docs/service.md §Clients).
"""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any, Union, cast, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from accounting.accountants import AccountantName
from accounting.errors import located_validation_error
from accounting.validation import Flag, InputModel
from app.models import as_utc
from app.security import Role
from planner.schema import (
    ComparisonRow,
    Epsilon,
    GroupSpec,
    Plan,
    PlanDocument,
    PlanMethod,
    Recommendation,
    Scenario,
)
from planner.service_api import GroupLedger, KeyIdentity, LedgerOut, RoundReport, RoundStatus
from planner.units import UNITS, PlanningMethod, PrivacyUnit, ScenarioDocument, scenario_unit_name

Name = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")]
# SQLite hands back naive datetimes; every stored time is UTC and is served with its offset.
UtcDatetime = Annotated[datetime, AfterValidator(as_utc)]


__all__ = ["GroupLedger", "KeyIdentity", "LedgerOut", "RoundReport", "RoundStatus"]  # re-exported


class _Input(InputModel):
    model_config = ConfigDict(extra="forbid")


# --- keys -------------------------------------------------------------------------------


class KeyCreate(_Input):
    name: Name
    role: Role = "planner"


class KeyOut(BaseModel):
    name: str
    role: str
    created_at: UtcDatetime
    created_by: str | None = None
    revoked_at: UtcDatetime | None = None


class KeyCreated(KeyOut):
    token: str = Field(description="the API key; shown only in this response, stored hashed")


# --- plans ------------------------------------------------------------------------------


def _units_described(what: str) -> str:
    return "; ".join(f"{unit.name}: {what.format(unit=unit)}" for unit in UNITS.values())


# What POST /v1/plans plans with: every registered unit's methods (planner.units), one named
# enum in the OpenAPI document (app/openapi.py), so a generated client types it.
PlanCreateMethod = PlanningMethod


class PlanCreate(_Input):
    """A scenario of any registered privacy unit (its ``privacy_unit``; absent: client-level)
    with one of that unit's planning methods (docs/service.md §Plans)."""

    scenario: ScenarioDocument
    method: PlanCreateMethod | None = Field(
        None, description="one of the scenario's unit's methods (default: "
        + _units_described("{unit.default_method}") + ")"
    )

    @model_validator(mode="before")
    @classmethod
    def _planned_unit(cls, body: Any) -> Any:
        # before the fields: an unknown unit would be answered "Input tag ... does not match
        # any of the expected tags" at the scenario, not at its privacy_unit
        scenario = body.get("scenario") if isinstance(body, dict) else None
        unit = scenario_unit_name(scenario) if isinstance(scenario, dict) else None
        if unit is not None and unit not in UNITS:
            raise located_validation_error("PlanCreate", [(
                ("scenario", "privacy_unit"),
                f"unknown privacy unit {unit!r}; the service plans {', '.join(UNITS)} scenarios",
                unit,
            )])
        return body

    @field_validator("method", mode="before")
    @classmethod
    def _known_method(cls, method: Any) -> Any:
        # before the enum's own check: an unknown name gets one line listing the known ones,
        # not pydantic's "Input should be 'nonprivate', 'dp_fedavg', ..."
        known = get_args(PlanCreateMethod)
        if method is not None and method not in known:
            raise ValueError(f"unknown method {method!r}; known: {', '.join(known)}")
        return method


class StoredPlan(Plan):
    """A plan document as stored by the service: the plan plus its id and provenance.

    The body is a valid plan document (``planner.units.load_plan`` reads it), so the
    trainer can execute the response of ``GET /v1/plans/{id}`` directly.
    """

    id: str
    created_at: UtcDatetime
    created_by: str | None = None
    population_id: str | None = None
    superseded_by: str | None = Field(
        None, description="id of this plan's re-plan (which covers the rounds from its start_round on)"
    )


class _Provenance(BaseModel):
    id: str
    created_at: UtcDatetime
    created_by: str | None = None
    population_id: str | None = None
    superseded_by: str | None = Field(
        None, description="id of this plan's re-plan (which covers the rounds from its start_round on)"
    )


def stored_model(unit: PrivacyUnit) -> type[AnyStoredPlan]:
    """The stored form of ``unit``'s plans: its plan document plus id and provenance
    (``StoredPlan`` for client-level plans, ``Stored<PlanModel>`` for the others). Its
    figures are in the unit's own notion (``notion``), never added to another unit's."""
    return _stored_model(unit.name)


@cache
def _stored_model(name: str) -> type[AnyStoredPlan]:
    unit = UNITS[name]
    if issubclass(StoredPlan, unit.plan_model):
        return cast("type[AnyStoredPlan]", StoredPlan)
    name = f"Stored{unit.plan_model.__name__}"
    doc = f"A {unit.name} plan as stored by the service: {unit.notion}."
    return cast("type[AnyStoredPlan]", type(name, (unit.plan_model, _Provenance), {"__doc__": doc, "__module__": __name__}))


if TYPE_CHECKING:
    class AnyStoredPlan(PlanDocument, _Provenance):  # what every stored model is
        pass
else:
    # a stored plan of any unit, told apart by privacy_unit (a discriminator in the document)
    AnyStoredPlan = Annotated[
        Union[tuple(stored_model(unit) for unit in UNITS.values())],  # noqa: UP007
        Field(discriminator="privacy_unit"),
    ]


class PlanSummary(BaseModel):
    id: str
    created_at: UtcDatetime
    method: str
    label: str = Field(description="the label the plan's figures are shown under (its unit's)")
    privacy_unit: str = Field(
        description="whom the plan protects (" + _units_described("{unit.label}") + "); "
        "different notions, never added or compared"
    )
    accountant: AccountantName | None = Field(description="null for units whose figures have no accountant (metric leakage)")
    start_round: int
    rounds: int
    parent_plan_id: str | None = None
    population_id: str | None = None


class PlanPage(BaseModel):
    items: list[PlanSummary]
    total: int = Field(description="number of plans matching the filter")
    limit: int
    offset: int | None = None
    next_cursor: str | None = Field(None, description="pass as ?cursor= for the next page; null at the end")


class ReplanRequest(_Input):
    """A re-plan of the remaining rounds; ``changes`` is the plan's unit's budget change
    (``PrivacyUnit.changes_model``), validated once the plan is known."""

    rounds_done: int | None = Field(
        None, ge=0, description="rounds of this plan already run; default: what the ledger recorded"
    )
    changes: dict[str, Any] = Field(
        default_factory=dict,
        description="the plan's unit's changes: " + _units_described("{unit.changes_model.__name__}")
        + " (a budget below what was spent is refused 409 budget_conflict)",
    )


# --- ledger -----------------------------------------------------------------------------


class RoundRecord(BaseModel):
    plan_id: str
    round_index: int
    status: RoundStatus = "completed"
    aborted_pools: list[str]
    metrics: dict[str, float | None]
    reported_at: UtcDatetime
    reported_by: str | None = None
    participants: dict[str, list[int]] | None = Field(
        None, description="metric plans: the round's participants as recorded (null: not reported)"
    )
    duplicate: bool = Field(False, description="true when this round was already recorded (nothing changed)")


# --- populations ------------------------------------------------------------------------


_POPULATION_UNIT = Scenario.model_fields["privacy_unit"].default  # populations are client-level


class PopulationCreate(_Input):
    name: Annotated[str, Field(min_length=1, max_length=200)]
    scenario: Scenario
    method: PlanMethod = "gdpfed_plus"

    @field_validator("scenario", mode="before")
    @classmethod
    def _client_level(cls, scenario: Any) -> Any:
        unit = scenario_unit_name(scenario) if isinstance(scenario, dict) else _POPULATION_UNIT
        if unit != _POPULATION_UNIT:
            raise ValueError(
                f"populations hold client-level scenarios only; this one's privacy_unit is {unit!r} "
                "(plan it with POST /v1/plans)"
            )
        return scenario


class PopulationOut(BaseModel):
    id: str
    name: str
    method: str
    scenario: Scenario
    active_plan_id: str | None = None
    version: int
    created_at: UtcDatetime
    updated_at: UtcDatetime
    created_by: str | None = None


class PopulationPage(BaseModel):
    items: list[PopulationOut]
    total: int
    limit: int
    offset: int


class GroupPatch(_Input):
    """Change one group's budget or size. Unset fields keep their value."""

    epsilon: Epsilon | None = None
    num_clients: int | None = Field(None, ge=1, le=10**9)
    opt_out: Flag = Field(False, description="set the group's epsilon to null (no DP) from now on")

    @model_validator(mode="after")
    def _something(self) -> GroupPatch:
        if self.epsilon is None and self.num_clients is None and not self.opt_out:
            raise ValueError("give at least one of epsilon, num_clients, opt_out: true (null, absent or "
                             "opt_out: false: unchanged)")
        if self.opt_out and self.epsilon is not None:
            raise ValueError("give epsilon or opt_out, not both")
        return self


class ChangeOut(BaseModel):
    at: UtcDatetime
    actor: str
    group_id: str | None
    field: str
    old: Any = None
    new: Any = None
    plan_id: str | None = Field(None, description="the re-plan this change produced, if any")


class ChangePage(BaseModel):
    items: list[ChangeOut]
    total: int
    limit: int
    offset: int


class PopulationChangeResult(BaseModel):
    population: PopulationOut
    changes: list[ChangeOut]
    plan: StoredPlan | None = Field(None, description="the re-plan the change required (the new active plan)")


GroupAdd = GroupSpec


# --- operator console (docs/service.md §Console) ----------------------------------------


class ConsoleGroup(BaseModel):
    id: str
    epsilon: float | None = Field(description="the group's budget in the registry; null = opted out")
    num_clients: int
    epsilon_spent: float | None = Field(None, description="per the service's ledger of the active plan")
    epsilon_rdp: float | None = Field(None, description="the ledger row's rdp figure (docs/ledger.md §3)")
    epsilon_tight: float | None = Field(None, description="the ledger row's tight (pld) figure")
    epsilon_remaining: float | None = None
    opted_out: bool = False
    sampling_rate: float | None = None
    pool: str | None = None


class SpentSeries(BaseModel):
    rounds: list[int] = Field(description="global round counts (rounds done)")
    epsilon_spent: dict[str, list[float | None]] = Field(description="group id -> epsilon after each round count")
    budget: dict[str, list[float | None]] = Field(description="group id -> its budget in the plan covering it")


class ConsoleLineage(BaseModel):
    id: str
    parent_plan_id: str | None = None
    superseded_by: str | None = None
    method: str
    accountant: AccountantName | None = None
    start_round: int
    rounds: int
    rounds_counted: int
    created_at: UtcDatetime
    created_by: str | None = None
    active: bool = False


class ConsolePopulation(BaseModel):
    population: PopulationOut
    unit: str | None = Field(description="what the epsilon figures are: notion, delta, accountant")
    groups: list[ConsoleGroup]
    rounds_counted: int = 0
    series: SpentSeries | None = None
    lineage: list[ConsoleLineage]
    mechanism: str | None = Field(
        None, description="the noise mechanism the active plan's run executes (exact, or the continuous one labelled "
        "approximate) and, for the discrete one, the threat model; null: no round reported yet"
    )


class ConsolePlanRow(BaseModel):
    id: str = Field(description="the protected entity: a group or a silo")
    budget: float | None
    spent: float | None
    remaining: float | None


class ConsolePlan(BaseModel):
    """A plan of any unit as the console shows it: its ledger's figures under its unit's label."""

    plan_id: str
    privacy_unit: str
    label: str = Field(description="e.g. silo sample-level, leakage (metric d-privacy): never added or compared")
    figure: str = Field(description="what budget, spent and remaining are: epsilon or leakage")
    entities: str = Field(description="what the rows are: groups or silos")
    budget_field: str = Field(description="the budget's field in a re-plan's changes (epsilon, leakage_budget)")
    unit: str = Field(description="the label, the notion and, for epsilons, delta and accountant")
    rounds_counted: int = Field(description="global rounds counted by the service's ledger")
    rows: list[ConsolePlanRow]
    lineage: list[ConsoleLineage] = Field(description="the plan's ancestors, oldest first, then the plan")
    mechanism: str | None = Field(
        None, description="client-level plans: the noise mechanism the run executes (exact, or the continuous one "
        "labelled approximate) and, for the discrete one, the threat model; null: no round reported yet, or a unit "
        "without secure-aggregation noise"
    )


class ConsoleComparison(BaseModel):
    unit: str
    recommendation: Recommendation | None = None
    comparison: list[ComparisonRow]
