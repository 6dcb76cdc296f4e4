"""The service's wire models that its own clients share (docs/service.md §Clients).

The trainer's reporting client (``trainer.run.reporting``) claims and reports rounds,
reads ledgers, checks its key and parses the service's errors. The bodies it sends and
reads are these models, and the service (``app.schemas``, ``app.errors``) serves the very
same classes, so its OpenAPI document and the trainer's code cannot drift. They live here,
below both ``app`` and ``trainer`` (the trainer never imports ``app``, docs/architecture.md
§Dependency direction), beside the plan schema they travel with.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from accounting.choices import AccountantName, SecaggMechanism
from accounting.events import Phase, PoissonSampledSkellam
from accounting.validation import InputModel

PoolId = Annotated[str, Field(min_length=1, max_length=64)]
GroupName = Annotated[str, Field(min_length=1, max_length=64)]
ClientId = Annotated[int, Field(ge=0, le=10**12)]
MetricName = Annotated[str, Field(min_length=1, max_length=64)]
# a reporting run's identity (trainer.run.reporting.new_run_id: 32 hex digits)
RunId = Annotated[str, Field(min_length=8, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
RoundStatus = Literal["started", "completed"]


# Start-up time: the wire models build their validators on first use (defer_build): every
# `gdpfed plan` imports this module (the privacy units name their ledgers), and only the
# service and the trainer's reporting client send or read these bodies.
_DEFERRED = ConfigDict(defer_build=True)


def _finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


class ErrorBody(BaseModel):
    """The JSON body of every error response (docs/service.md §Errors)."""

    model_config = _DEFERRED

    code: str
    message: str
    field: str | None = None
    superseded_by: str | None = Field(
        None, description="code superseded: the plan that covers this round (its re-plan)"
    )
    start_round: int | None = Field(None, description="code superseded: the round the re-plan starts at")


class KeyIdentity(BaseModel):
    """``GET /v1/keys/me``: the calling key's name and role."""

    model_config = _DEFERRED

    name: str
    role: str


class RoundReport(InputModel):
    """``POST /v1/plans/{plan_id}/rounds``: one round, claimed or completed (docs/ledger.md §6)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    round_index: int = Field(
        ..., ge=0, le=10**9,
        description="GLOBAL round index: plan.start_round <= round_index < plan.start_round + plan.rounds",
    )
    status: RoundStatus = Field(
        "completed",
        description="started: claim the round before running it (an attached trainer; the round counts "
        "as spent from then on); completed: the round ran, with its aborted pools and metrics",
    )
    aborted_pools: list[PoolId] = Field(default_factory=list, max_length=10_000)
    metrics: dict[MetricName, Annotated[float | None, AfterValidator(_finite_or_none)]] = Field(
        default_factory=dict, max_length=256,
        description="informational numbers (loss, accuracy, ...); NaN and infinities are stored as null "
        "so that a diverged round is still recorded",
    )
    # left out of a body when absent, so a client-level report is what it was before
    participants: dict[GroupName, list[ClientId]] | None = Field(
        None, max_length=10_000, exclude_if=lambda value: value is None,
        description="plans whose unit counts participations (metric_local) only: group id -> the run's ids of "
        "the clients of that group that released a model in this round (ids 0 to the plan's total clients - 1; "
        "each client once, in one group; at most "
        "the group's num_clients distinct clients over the run). Given with the claim or with the completion; once "
        "given it cannot change. A counted round without it counts as one more release of every client (never "
        "optimistic). Other units refuse it (422 naming participants)",
    )
    # left out of a body when absent, so a report of another unit is what it was before
    secagg_mechanism: SecaggMechanism | None = Field(
        None, exclude_if=lambda value: value is None,
        description="client-level plans: the noise mechanism the run's secure aggregation executes, which the "
        "service's ledger counts (docs/ledger.md §3): skellam (the plan's discrete blocks, exact) or "
        "gaussian_continuous (approximate); absent means gaussian_continuous (reporters from before this field). "
        "A run keeps one mechanism: a report naming another than the run's earlier rounds (on this plan or the "
        "plans it re-planned) is refused 409 naming secagg_mechanism; skellam on a plan without discrete blocks "
        "is refused 422. Other units refuse it (422)",
    )
    # left out of a body when absent, so a report from before this field is what it was before
    run_id: RunId | None = Field(
        None, exclude_if=lambda value: value is None,
        description="the reporting run's identity (gdpfed train draws one per run directory and keeps it across "
        "--resume): the plan's first report that states one binds the plan's rounds to that run, and a report "
        "stating another is refused 409 naming run_id, since two runs of one plan release its rounds twice "
        "while the ledger counts them once (docs/ledger.md §4). Absent: accepted until a report binds the plan "
        "to a run (reporters from before this field), then refused 409 naming run_id",
    )


class GroupLedger(BaseModel):
    model_config = _DEFERRED

    id: str
    epsilon: float | None = Field(description="the group's target epsilon in this plan; null = opted out")
    phases: list[Phase] = Field(description="continuous Gaussian phases run so far, parent plans first, identical "
                                "runs merged (a discrete group's parents' phases only: its rounds are in events)")
    events: list[PoissonSampledSkellam] = Field(
        default_factory=list,
        description="secagg_mechanism skellam: the group's Poisson-subsampled Skellam events, those its parent plans' "
        "runs spent (spent_discrete) then its pool's of the counted rounds (the pool's discrete block, "
        "docs/secure-aggregation.md §Discrete noise); empty on the continuous path",
    )
    secagg_mechanism: SecaggMechanism | None = Field(
        None, description="the mechanism the group's figures count: skellam where its pool states a discrete block "
        "and the run executes it, else gaussian_continuous (approximate)",
    )
    threat_model: str | None = Field(
        None, description="skellam: the threat model the figure holds under, the pool's discrete block's line "
        "(colluding clients, honest survivors); null on the continuous path, which states none",
    )
    delta_accounted: float | None = Field(
        None, description="the delta the events are accounted at: the ledger's delta, less the wrap-around bound of "
        "each counted round on skellam (charged to delta, so the figure holds at the ledger's delta)",
    )
    steps: int = Field(description="rounds this group was sampled with a nonzero rate")
    epsilon_spent: float | None = Field(description="epsilon of the phases; null when a phase had no noise")
    epsilon_rdp: float | None = Field(
        None, description="the same phases' epsilon under rdp (docs/ledger.md §3); null as epsilon_spent"
    )
    epsilon_tight: float | None = Field(
        None, description="the same phases' epsilon under the tight accountant, pld; null as epsilon_spent"
    )
    epsilon_remaining: float | None = None
    opted_out: bool = False


class LedgerOut(BaseModel):
    """``GET /v1/plans/{plan_id}/ledger``: privacy spent per group (docs/ledger.md §3)."""

    model_config = _DEFERRED

    plan_id: str
    privacy_unit: str = Field(description="the notion of every epsilon below: client = client-level DP per group")
    accountant: AccountantName = Field(
        description="accountant of epsilon_spent: the plan accountant's verified_by (the plan's; rdp for closed_form); "
        "rows priced by Skellam events (secagg_mechanism skellam), their blocks' (rdp for a prv plan)"
    )
    delta: float
    start_round: int
    rounds: int
    rounds_reported: int = Field(description="distinct rounds of this plan reported")
    last_round_index: int | None = None
    rounds_counted: int = Field(
        description="rounds of this plan counted as spent: every round up to the last one claimed "
        "or reported (a lost report never hides privacy spent)"
    )
    superseded_by: str | None = None
    # defaults: a ledger from a service before these fields is read as it was
    notion: str = Field("client-level (epsilon, delta)-DP per group",
                        description="the privacy notion of every epsilon below (planner.units)")
    label: str = Field("client-level", description="the short label every figure is shown under; never added to or "
                       "compared with another unit's figures")
    secagg_mechanism: SecaggMechanism | None = Field(
        None, description="the noise mechanism the run's rounds executed, as its round reports state (this plan's, "
        "else the nearest re-planned ancestor's): skellam (exact) or gaussian_continuous (approximate); null: no "
        "round of the run reported yet",
    )
    mechanism_label: str | None = Field(None, description="secagg_mechanism in words, saying exact or approximate")
    groups: list[GroupLedger]


class LedgerRounds(BaseModel):
    """What every unit's ledger says about the rounds it counts (docs/ledger.md §4)."""

    model_config = _DEFERRED

    plan_id: str
    privacy_unit: str
    notion: str = Field(description="the privacy notion of every figure of this ledger (planner.units)")
    label: str = Field(description="the short label every figure is shown under; never added to or "
                       "compared with another unit's figures")
    start_round: int
    rounds: int
    rounds_reported: int = Field(description="distinct rounds of this plan reported")
    last_round_index: int | None = None
    rounds_counted: int = Field(
        description="rounds of this plan counted as spent: every round up to the last one claimed or reported"
    )
    superseded_by: str | None = None


class SiloLedger(BaseModel):
    model_config = _DEFERRED

    id: str
    epsilon: float = Field(description="the silo's sample-level budget in this plan")
    epsilon_spent: float = Field(description="sample-level epsilon of the silo's DP-SGD steps and selections so far "
                                 "(parent plans' rounds included)")
    epsilon_rdp: float | None = Field(None, description="the same history's epsilon under rdp (docs/ledger.md §3)")
    epsilon_tight: float | None = Field(None, description="the same history's epsilon under pld, the tight one")
    epsilon_remaining: float
    steps: int = Field(description="DP-SGD steps the silo ran in the counted rounds of this plan")
    noise_multiplier: float = Field(description="sigma_k of this plan's rounds")


class SiloLedgerOut(LedgerRounds):
    """``GET /v1/plans/{plan_id}/ledger`` of a silo_sample plan: each silo's sample-level epsilon
    (docs/ledger.md §7). Never a client-level figure."""

    accountant: AccountantName
    delta: float
    silos: list[SiloLedger]


class MetricGroupLedger(BaseModel):
    model_config = _DEFERRED

    id: str
    num_clients: int
    noise_multiplier: float = Field(description="nu of the group's releases")
    leakage_budget: float | None = Field(description="L per client in this plan; null = none (no cap)")
    max_participations: int | None = Field(description="the participation cap floor(L nu / n); null = none")
    leakage_per_participation: float | None = Field(description="n / nu; null when nu = 0 (no guarantee)")
    clients_participated: int = Field(description="distinct clients of the group reported as releasing")
    participations_max: int = Field(description="most releases by one client, rounds without participants "
                                    "counted as one more release of every client")
    participations_median: float = Field(description="median releases over the group's num_clients clients "
                                         "(clients never reported count 0), on the same count")
    leakage_spent: float | None = Field(
        description="the worst case over the group's clients: participations_max * n / nu; null when nu = 0"
    )
    leakage_median: float | None = Field(description="participations_median * n / nu; null when nu = 0")
    leakage_remaining: float | None = Field(description="leakage_budget - leakage_spent; null without a budget")


class MetricLedgerOut(LedgerRounds):
    """``GET /v1/plans/{plan_id}/ledger`` of a metric_local plan: each group's leakage from the
    participations the run reported (docs/ledger.md §8). Leakages, never epsilons."""

    rounds_without_participants: int = Field(
        description="counted rounds of the run whose participants were never reported"
    )
    groups: list[MetricGroupLedger]
