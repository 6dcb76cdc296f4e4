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
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

from accounting.accountants import AccountantName
from accounting.validation import Flag, InputModel
from app.errors import SCENARIO_TAGS
from app.models import as_utc
from app.security import Role
from planner.schema import (
    Changes,
    ComparisonRow,
    Epsilon,
    GroupSpec,
    Plan,
    PlanMethod,
    Recommendation,
    RequestedMethod,
    Scenario,
)
from planner.service_api import GroupLedger, KeyIdentity, LedgerOut, RoundReport, RoundStatus
from planner.units.silo_sample import SiloMethod, SiloSamplePlan, SiloScenario

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


def _scenario_unit(value: Any) -> str:
    """The privacy unit a scenario asks for (absent: client), which selects its model."""
    unit = value.get("privacy_unit", "client") if isinstance(value, dict) else getattr(value, "privacy_unit", "client")
    return unit if unit in SCENARIO_TAGS else "client"


# What POST /v1/plans plans with: a client method or "compare" (planner.units.client's
# methods), or a silo method (planner.units.silo_sample's); one named enum in the OpenAPI
# document (app/openapi.py), so a generated client types it.
PlanCreateMethod = Literal[RequestedMethod, SiloMethod]


class PlanCreate(_Input):
    """A client-level scenario with a planning method, or a silo scenario
    (``privacy_unit: silo_sample``, docs/mrmtl.md §2) with a silo method."""

    scenario: Annotated[
        Annotated[Scenario, Tag("client")] | Annotated[SiloScenario, Tag("silo_sample")],
        Discriminator(_scenario_unit),
    ]
    method: PlanCreateMethod | None = Field(
        None, description="a planning method (client scenarios, default gdpfed_plus) or a silo method "
        "(silo scenarios, default mrmtl)"
    )

    @model_validator(mode="before")
    @classmethod
    def _planned_unit(cls, body: Any) -> Any:
        # before the fields: a unit the service does not plan would be read as a client
        # scenario and answered "privacy_unit: Input should be 'client' (and 10 more)", its
        # method (metric_laplace) as unknown besides
        scenario = body.get("scenario") if isinstance(body, dict) else None
        unit = scenario.get("privacy_unit", "client") if isinstance(scenario, dict) else "client"
        if unit not in SCENARIO_TAGS:
            from accounting.errors import located_validation_error

            raise located_validation_error("PlanCreate", [(
                ("scenario", "privacy_unit"),
                f"the service plans client and silo_sample scenarios, not {unit!r}; "
                "plan a metric_local scenario with gdpfed plan (docs/service.md §Plans)",
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

    The body is a valid plan document (``planner.schema.load_plan`` reads it), so the
    trainer can execute the response of ``GET /v1/plans/{id}`` directly.
    """

    id: str
    created_at: UtcDatetime
    created_by: str | None = None
    population_id: str | None = None
    superseded_by: str | None = Field(
        None, description="id of this plan's re-plan (which covers the rounds from its start_round on)"
    )


class StoredSiloPlan(SiloSamplePlan):
    """A silo_sample plan as stored by the service (docs/mrmtl.md §2): every silo's DP-SGD
    mechanism and its silo-specific sample-level epsilon, labelled ``notion``; never shown
    as, or added to, a client-level figure. Silo plans are not re-planned and their runs do
    not report rounds to the service (the ledger endpoints refuse them)."""

    id: str
    created_at: UtcDatetime
    created_by: str | None = None
    population_id: str | None = None
    superseded_by: str | None = None


class PlanSummary(BaseModel):
    id: str
    created_at: UtcDatetime
    method: str
    privacy_unit: str = Field(
        description="whom the plan protects: client (client-level DP per group) or silo_sample "
        "(silo-specific sample-level DP per silo); different notions, never compared"
    )
    accountant: AccountantName
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
    rounds_done: int | None = Field(
        None, ge=0, description="rounds of this plan already run; default: what the ledger recorded"
    )
    changes: Changes = Field(default_factory=Changes)


# --- ledger -----------------------------------------------------------------------------


class RoundRecord(BaseModel):
    plan_id: str
    round_index: int
    status: RoundStatus = "completed"
    aborted_pools: list[str]
    metrics: dict[str, float | None]
    reported_at: UtcDatetime
    reported_by: str | None = None
    duplicate: bool = Field(False, description="true when this round was already recorded (nothing changed)")


# --- populations ------------------------------------------------------------------------


class PopulationCreate(_Input):
    name: Annotated[str, Field(min_length=1, max_length=200)]
    scenario: Scenario
    method: PlanMethod = "gdpfed_plus"

    @field_validator("scenario", mode="before")
    @classmethod
    def _client_level(cls, scenario: Any) -> Any:
        unit = scenario.get("privacy_unit", "client") if isinstance(scenario, dict) else "client"
        if unit != "client":
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
            raise ValueError("give at least one of epsilon, num_clients, opt_out (null or absent: unchanged)")
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
    accountant: AccountantName
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


class ConsoleComparison(BaseModel):
    unit: str
    recommendation: Recommendation | None = None
    comparison: list[ComparisonRow]
