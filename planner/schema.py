"""The plan schema: scenario in, plan out (schema_version 2).

This module is the contract between the planner, the HTTP service and the trainer
(docs/planning.md §8). Everything a user hands in is validated here
with field-level messages; everything the planner hands out is a plan document.

Plan kinds: every plan document (``PlanDocument``) names its ``privacy_unit``, whom its
privacy figures protect. ``Plan`` here is the ``client`` kind (client-level DP for groups
of clients); other units bring their own scenario and plan models through the
privacy-unit registry ``planner.units`` (docs/architecture.md §Privacy units), so a
plan is never read as a kind it is not.

Versioning: a plan carries ``schema_version``. ``planner.units.load_plan_document`` reads every version
this code knows and rejects others with a message naming the version, so a plan written
by one release is read by the next or refused clearly, never misread. Version 1
documents predate ``privacy_unit``; every one of them is a client-level plan and is read
as ``privacy_unit: client``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Annotated, Any, Final, Literal

from pydantic import (
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from accounting.errors import InvalidInputError, located_validation_error, one_error_for_union
from accounting.events import Phase, PoissonSampledSkellam
from accounting.validation import Flag, InputModel, NumbersModel

SCHEMA_VERSION: Final = 2
# Versions current_plan_data reads (1: before privacy_unit, read as a client plan).
READABLE_SCHEMA_VERSIONS = (1, 2)

from accounting.accountants import (  # noqa: E402  (the one list, beside its registry)
    DEFAULT_ACCOUNTANT,
    RDP_ACCOUNTANT,
    AccountantName,
)
from accounting.choices import RequestedSecagg as RequestedSecagg  # noqa: E402  (re-exported: the planner's name)
from accounting.choices import SecaggMechanism as SecaggMechanism  # noqa: E402  (re-exported: the planner's name)
from accounting.choices import SecaggMode  # noqa: E402

# The noise a scenario's pools carry when it names none (docs/secure-aggregation.md §Discrete noise):
# the distributed Skellam mechanism, whose accounting is exact. Plans written before the field
# existed name none either and ran the continuous Gaussian; Plan reads them as such.
DEFAULT_SECAGG_MECHANISM: Final[SecaggMechanism] = "skellam"

# A method is a choice of pools, sampling rates and keep ratios (docs/planning.md §2).
PlanMethod = Literal[
    "nonprivate",
    "dp_fedavg",
    "dp_fedavg_all",
    "gdpfed",
    "gdpfed_minus",
    "gdpfed_plus",
    "idp_sample",
    "idp_scale",
    "pooled_plus",
]
# What a caller may ask for: a single method, or every method side by side.
RequestedMethod = Literal[PlanMethod, "compare"]
# A group's state in a plan (GroupPlan.status); named so the service's OpenAPI document
# names it (app/openapi.py). A pool's secure-aggregation graph (SecaggMode) and what a run
# may ask for (RequestedSecagg) are accounting.choices', imported here with the accountant
# names: the trainer's parser offers them without loading the planner.
GroupStatus = Literal["active", "exhausted", "removed"]

# Domains of the scenario's numbers. The bounds are far outside any real deployment but
# keep the arithmetic of the objective (d C^2 / K^2, U^2 p (1 - kappa)^beta) finite: a
# subnormal clip norm or K would otherwise overflow or divide by zero deep in a solver.
Epsilon = Annotated[float, Field(gt=0, le=1e4, allow_inf_nan=False)]
Norm = Annotated[float, Field(ge=1e-6, le=1e6, allow_inf_nan=False)]
Fraction = Annotated[float, Field(ge=1e-6, le=1, allow_inf_nan=False)]
UnitInterval = Annotated[float, Field(ge=1e-9, le=1, allow_inf_nan=False)]
ClientCount = Annotated[float, Field(ge=1e-3, le=1e12, allow_inf_nan=False)]
GroupId = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")]
# A client scenario's total rounds, and a re-plan's new total (checked where it is given, so
# the error names changes.rounds, not the re-planned scenario's rounds)
RoundCount = Annotated[int, Field(ge=1, le=10**7)]


# keep_ratio "auto": the planner chooses (named for the service's OpenAPI document, app/openapi.py)
KeepRatioAuto = Literal["auto"]
KeepRatio = Annotated[Fraction | KeepRatioAuto, one_error_for_union("a number in [1e-06, 1] or 'auto'")]


def first_repeated(ids: Iterable[str]) -> str | None:
    """The first id that occurs a second time in ``ids``, or None: the one check behind every
    "each id once" rule of a scenario's groups, a re-plan's changes and a silo plan's silos."""
    seen: set[str] = set()
    for item in ids:
        if item in seen:
            return item
        seen.add(item)
    return None


class _Strict(InputModel):
    """Inputs reject unknown fields so a typo (``epsilom``) is an error, not a default."""

    model_config = ConfigDict(extra="forbid", strict=False)


class GroupSpec(_Strict):
    """One privacy group: clients that chose the same budget.

    ``epsilon: null`` means the group opted out of DP (FedHDP/FeO2 setting): it is
    aggregated securely but receives no noise, in a pool of its own.
    """

    id: GroupId
    epsilon: Epsilon | None = Field(
        ..., description="client-level epsilon of this group; null = opted out of DP"
    )
    num_clients: int = Field(..., ge=1, le=10**9)
    keep_ratio: KeepRatio | None = Field(
        None, description="top-k keep ratio k/d for this group's pool; null = scenario default"
    )
    min_sampling_rate: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = 0.0
    clip_norm: Norm | None = Field(
        None, description="per-group L2 clip norm; null = scenario clip_norm"
    )


class AdaptiveClip(_Strict):
    """Adaptive clipping (Andrew et al. 2021; docs/planning.md §15): the clip ``S^t`` follows
    a noisy count of unclipped clients, ``S^{t+1} = S^t exp(-eta_b (b_bar - kappa))``."""

    initial_clip_norm: Norm | None = Field(None, description="S^0; null = the scenario's clip_norm")
    target_quantile: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = Field(
        0.5, description="kappa: the share of clients whose update should stay unclipped"
    )
    learning_rate: Annotated[float, Field(ge=0, le=10, allow_inf_nan=False)] = Field(
        0.2, description="eta_b of the geometric update"
    )
    count_noise_std: Annotated[float, Field(gt=0, le=1e9, allow_inf_nan=False)] | None = Field(
        None,
        description="sigma_b: std of the noise on each pool's count of unclipped clients (sensitivity 1/2); "
        "null = 0.05 K. Must exceed z_eff / 2 of every pool with noise",
    )


class Scenario(_Strict):
    """Everything the planner needs: budgets, population and system parameters."""

    privacy_unit: Literal["client"] = Field(
        "client", description="whom the budgets protect: client-level DP for each group's clients"
    )
    groups: list[GroupSpec] = Field(..., min_length=1, max_length=200_000)
    delta: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)]
    rounds: RoundCount
    clip_norm: Norm = 1.0
    model_dim: int = Field(..., ge=1, le=10**12)
    expected_clients: ClientCount | None = Field(
        None, description="K: expected number of sampled clients per round (sum of q_g N_g)"
    )
    sampling_rate: UnitInterval | None = Field(
        None, description="global q; K = q * sum N_g. Give this or expected_clients, not both"
    )
    accountant: AccountantName = DEFAULT_ACCOUNTANT
    # Issue 27 (docs/secure-aggregation.md §Discrete noise). The mechanism is always written into a
    # plan's scenario, so a plan says what it runs; a plan written before the field existed reads
    # as what it ran (Plan._mechanism_of_an_older_plan).
    secagg_mechanism: SecaggMechanism = Field(
        DEFAULT_SECAGG_MECHANISM,
        description="the noise of every noised pool's secure aggregation: skellam, the distributed Skellam "
        "mechanism (exact: rounding, integer noise and the modular sum are accounted; each pool's plan states "
        "its discrete block), or gaussian_continuous, each client's Gaussian share rounded to the grid after "
        "noising (approximate; the comparison path). docs/secure-aggregation.md §Discrete noise",
    )
    keep_ratio: KeepRatio = 1.0
    min_keep_ratio: Fraction = 0.01
    min_clients_per_pool: int = Field(10, ge=1)
    dropout_rate: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] = 0.0
    abort_probability: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = 0.01
    update_norm_bound: Norm | None = Field(
        None, description="U in the objective; null = clip_norm"
    )
    sparsity_exponent: Annotated[float, Field(ge=0.1, le=10, allow_inf_nan=False)] = Field(2.0, description="beta in (1 - kappa)^beta")
    update_dispersion: Annotated[float, Field(ge=0, le=1e12, allow_inf_nan=False)] | None = Field(
        None,
        description="V = E||Delta_i - mean Delta||^2 of the clipped client updates, measured on a nonprivate "
        "proxy run; given, the plan predicts FedHDP's per-pool ratios r* (docs/planning.md §14)",
    )
    sampling_variance_per_coordinate: Annotated[float, Field(gt=0, le=1e12, allow_inf_nan=False)] | None = Field(
        None,
        description="alpha^2: variance of a client's local estimate around its own optimum, per model coordinate "
        "(squared parameter units); with heterogeneity_variance_per_coordinate the plan reports Ditto's advisory "
        "lambda* per group (docs/planning.md §14)",
    )
    heterogeneity_variance_per_coordinate: Annotated[float, Field(ge=0, le=1e12, allow_inf_nan=False)] | None = Field(
        None,
        description="tau^2: variance of the clients' own optima around the population's, per model coordinate "
        "(squared parameter units); give it with sampling_variance_per_coordinate (docs/planning.md §14)",
    )
    bias_weight: Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False)] = 1.0
    adaptive_clip: AdaptiveClip | None = Field(
        None,
        description="adaptive clipping's settings; the plan then states each pool's update noise multiplier "
        "sigma_Delta and count noise sigma_b for the same z_eff (docs/planning.md §15)",
    )
    raw_closed_form: Flag = Field(
        False,
        description="closed_form only: keep the paper's formula even where RDP shows it "
        "misses its target (the plan is then marked sound: false)",
    )
    report_prv: Flag = Field(
        False, description="also report each group's PRV upper bound on epsilon spent"
    )
    # Issue 27: report_discrete is secagg_mechanism's old spelling (above, beside the accountant).
    report_discrete: Flag | None = Field(
        None,
        exclude_if=lambda value: value is not True,
        description="the old spelling of secagg_mechanism: skellam (true); false no longer selects the "
        "continuous Gaussian (name secagg_mechanism: gaussian_continuous for that)",
    )
    colluding_clients: int = Field(
        0,
        ge=0,
        exclude_if=lambda value: value == 0,
        description="clients assumed to collude with the server: the discrete calibration counts only the "
        "noise of the t - c honest survivors (default 0: no client colludes)",
    )

    @field_validator("groups")
    @classmethod
    def _unique_group_ids(cls, groups: list[GroupSpec]) -> list[GroupSpec]:
        if (repeated := first_repeated(group.id for group in groups)) is not None:
            raise ValueError(f"duplicate group id {repeated!r}")
        return groups

    @model_validator(mode="after")
    def _one_participation_setting(self) -> Scenario:
        if (self.expected_clients is None) == (self.sampling_rate is None):
            # located at a field so that the one line names it (not "input:" / "scenario")
            field = "sampling_rate" if self.sampling_rate is not None else "expected_clients"
            raise located_validation_error("Scenario", [(
                (field,), "give exactly one of expected_clients or sampling_rate", getattr(self, field))])
        return self

    @model_validator(mode="after")
    def _one_mechanism(self) -> Scenario:
        if self.report_discrete and self.secagg_mechanism != "skellam":
            raise located_validation_error("Scenario", [(
                ("report_discrete",), "true is the old spelling of secagg_mechanism: skellam and contradicts "
                f"secagg_mechanism: {self.secagg_mechanism}; leave report_discrete out", True)])
        return self

    @property
    def mechanism(self) -> SecaggMechanism:
        """The noise the pools' secure aggregation carries: ``secagg_mechanism``, or skellam where
        ``report_discrete: true`` (its old spelling) asks for it."""
        return "skellam" if self.report_discrete else self.secagg_mechanism

    @model_validator(mode="after")
    def _ditto_model_inputs_together(self) -> Scenario:
        if (self.sampling_variance_per_coordinate is None) != (self.heterogeneity_variance_per_coordinate is None):
            missing = (
                "heterogeneity_variance_per_coordinate"
                if self.heterogeneity_variance_per_coordinate is None
                else "sampling_variance_per_coordinate"
            )
            raise located_validation_error("Scenario", [(
                (missing,), "missing: Ditto's lambda* needs both sampling_variance_per_coordinate (alpha^2) "
                "and heterogeneity_variance_per_coordinate (tau^2), or neither", None)])
        return self

    @property
    def total_clients(self) -> int:
        return sum(group.num_clients for group in self.groups)

    @property
    def participation(self) -> float:
        """K, the expected number of sampled clients per round."""
        if self.expected_clients is not None:
            return float(self.expected_clients)
        assert self.sampling_rate is not None
        return float(self.sampling_rate) * self.total_clients

    @property
    def objective_update_norm(self) -> float:
        """U, the update-norm bound of the objective (defaults to clip_norm)."""
        return float(self.update_norm_bound if self.update_norm_bound is not None else self.clip_norm)

    def group(self, group_id: str) -> GroupSpec:
        for group in self.groups:
            if group.id == group_id:
                return group
        raise InvalidInputError("group", f"no group with id {group_id!r}")


class GroupPlan(NumbersModel):
    """The plan for one group (docs/planning.md §8)."""

    id: str
    epsilon: float | None = Field(description="target epsilon; null = opted out")
    num_clients: int
    pool: str = Field(description="id of the pool whose noise draw this group shares")
    sampling_rate: Annotated[float, Field(ge=0, le=1)]
    expected_clients: float = Field(description="q_g * N_g")
    aggregation_weight: float = Field(description="p_g = q_g N_g / K")
    clip_norm: float
    noise_multiplier_required: float | None = Field(
        None, description="sigma this group alone needs at its rate (null = opted out)"
    )
    effective_noise_multiplier: float | None = Field(
        None, description="pool noise std / this group's clip norm"
    )
    epsilon_spent: float | None = Field(
        None, description="epsilon over all rounds (spent ones included) of the mechanism the plan runs: "
        "the verified Gaussian phases', or under skellam its pool's discrete block's Skellam events at delta less "
        "the wrap-around charge, the run's full ledger (docs/ledger.md §3); null = opted out"
    )
    epsilon_rdp: float | None = Field(
        None, description="the same history's epsilon under rdp (docs/ledger.md §3); null = opted out, or a plan "
        "written before these figures existed"
    )
    epsilon_tight: float | None = Field(
        None, description="the same history's epsilon under the tight accountant, pld (docs/accounting.md §13); "
        "null = opted out, or a plan written before these figures existed"
    )
    epsilon_spent_prv_upper: float | None = None
    sound: bool = Field(True, description="false only for raw closed-form plans that RDP refutes")
    phases: list[Phase] = Field(
        default_factory=list,
        description="this group's full privacy history: spent phases of parent plans, then this plan's",
    )
    spent_phase_count: int = Field(
        0,
        ge=0,
        description="how many leading entries of phases were spent under parent plans "
        "(the rest is this plan's own phase, if the group is sampled)",
    )
    # A re-plan of a plan whose run executes the discrete mechanism (docs/planning.md §9): what
    # the run spent, as the ledger prices it. Left out of the JSON when empty, so every other
    # plan keeps its bytes (and digests).
    spent_discrete: list[PoissonSampledSkellam] = Field(
        default_factory=list,
        exclude_if=lambda value: not value,
        description="the Poisson-subsampled Skellam events the group spent under parent plans' discrete "
        "blocks (a skellam run's history; phases keep the continuous record beside it)",
    )
    spent_wrap_probability: float = Field(
        0.0,
        ge=0,
        exclude_if=lambda value: value == 0,
        description="the wrap-around probability those spent rounds charged to delta",
    )
    unprotected_rounds: int = Field(
        0,
        ge=0,
        description="rounds of parent plans in which the group was sampled without noise "
        "(while opted out); a group with any cannot later claim a finite epsilon",
    )
    status: GroupStatus = Field(
        "active",
        description="exhausted: its budget is used up; removed: dropped by a change. "
        "Both are sampled at rate 0 in this plan",
    )


# The two noise mechanisms of a pool that runs secure aggregation, and what each claims
# (docs/secure-aggregation.md §Discrete noise; SecaggMechanism names them): the continuous path
# stays available by name.
# The privacy notion of a client plan's figures (planner.units.client, planner.report).
CLIENT_NOTION = "client-level (epsilon, delta)-DP per group"

MECHANISM_LABELS: dict[str, str] = {
    "skellam": "distributed Skellam (exact: rounding, integer noise and modular sum accounted)",
    "gaussian_continuous": "continuous Gaussian (approximate: per-client rounding after noise is not accounted)",
}


class DiscreteMechanism(NumbersModel):
    """One pool's discrete distributed mechanism, as calibrated (docs/secure-aggregation.md §Discrete noise)."""

    mechanism: Literal["skellam"] = "skellam"
    label: str = Field(MECHANISM_LABELS["skellam"])
    # Blocks written before this field existed were all calibrated by rdp: that is the default.
    accountant: AccountantName = Field(
        RDP_ACCOUNTANT,
        description="the accountant that calibrated mu and states epsilon: pld (tight; a pld plan's) or rdp (every "
        "other plan's: prv and closed_form cannot account the Skellam event)",
    )
    clip_norm: float = Field(description="C: clients clip their update to this L2 norm first")
    dimension: int = Field(description="d: coordinates of the update")
    padded_dimension: int = Field(description="d': the power of two the rotation works in")
    rotation: Literal["randomized_hadamard"] = "randomized_hadamard"
    scale: float = Field(description="s: updates are multiplied by s before rounding (grid step gamma = 1/s)")
    gamma: float = Field(description="1/s: the grid step in update units")
    rounding: Literal["conditional_randomized"] = "conditional_randomized"
    rounding_beta: float = Field(description="per-draw failure probability the L2 bound is set for")
    l2_sensitivity: float = Field(description="D2: every rounded vector's L2 norm is at most this (grid units)")
    l1_sensitivity: float = Field(description="D1: every rounded vector's L1 norm is at most this (grid units)")
    min_survivors: int = Field(description="t: the sum is released only with >= t survivors")
    colluding_clients: int = Field(description="c: clients assumed to collude with the server (their shares known)")
    honest_survivors: int = Field(description="t - c: whose noise alone is counted")
    total_variance: float = Field(description="mu: Skellam variance per coordinate of the honest survivors' shares")
    share_variance: float = Field(description="each client's Skellam share: Poisson(v/2) - Poisson(v/2), v = this")
    equivalent_noise_multiplier: float = Field(description="sqrt(mu) / (C s): the continuous sigma of equal noise")
    max_clients: int = Field(description="n: most vectors one round sums (the bit width covers them)")
    bits: int = Field(
        description="b: shares are encoded mod 2^b; the wrap bound holds for max_clients vectors at the pool's "
        "largest clip norm"
    )
    wrap_probability_per_round: float = Field(description="bound on P(some coordinate wraps) in one round")
    wrap_probability_run: float = Field(description="rounds * the per-round bound: counted in delta")
    sampling_rate: float
    rounds: int
    delta: float = Field(description="the pool's delta; the mechanism is accounted at delta - wrap_probability_run")
    epsilon: float = Field(
        description="epsilon of the Poisson-subsampled Skellam event at delta - wrap_probability_run under accountant "
        "(pld: the figure of record, at that delta less its tail mass, docs/accounting.md §11.7)"
    )
    gaussian_epsilon_same_bound: float = Field(
        description="continuous Gaussian of equal noise (equivalent_noise_multiplier) at the same delta by the same "
        "bound (pld; rdp: Zhu and Wang's general subsampling bound)"
    )
    discretisation_overhead: float = Field(description="epsilon / gaussian_epsilon_same_bound - 1")
    gaussian_epsilon: float = Field(
        description="continuous Gaussian of equal noise (equivalent_noise_multiplier) at the plan's delta under "
        "accountant (rdp: its exact sampled-Gaussian curve)"
    )
    overhead_vs_continuous: float = Field(
        description="epsilon / gaussian_epsilon - 1: what the exact mechanism costs in epsilon at equal noise"
    )
    threat_model: str
    count_factor: int = Field(
        0,
        ge=0,
        description="m: with adaptive clipping each client appends one integer coordinate, m (2 b - 1) for its "
        "bit b = [norm <= S^t], with its own Skellam share of share_variance; 0: no count coordinate",
    )
    count_noise_std: float | None = Field(
        None, description="sqrt(mu) / (2 m): the released count sum (b - 1/2)'s noise std (None without a count)"
    )

    @property
    def released_l2_sensitivity(self) -> float:
        """The released vector's L2 sensitivity: sqrt(D2^2 + m^2) (D2 alone without a count)."""
        return math.sqrt(self.l2_sensitivity**2 + self.count_factor**2) if self.count_factor else self.l2_sensitivity

    @property
    def released_l1_sensitivity(self) -> float:
        """The released vector's L1 sensitivity: D1 + m."""
        return self.l1_sensitivity + self.count_factor

    def event(self, steps: int | None = None) -> PoissonSampledSkellam:
        """The ledger's event for ``steps`` rounds (default: the planned rounds); with a count
        coordinate its sensitivities are the released vector's (update and count together)."""
        return PoissonSampledSkellam(
            sampling_rate=self.sampling_rate,
            variance=self.share_variance * self.honest_survivors,
            l2_sensitivity=self.released_l2_sensitivity,
            l1_sensitivity=self.released_l1_sensitivity,
            steps=self.rounds if steps is None else steps,
        )


class PoolPlan(NumbersModel):
    """One secure-aggregation session with one noise draw per round."""

    id: str
    groups: list[str]
    noise_multiplier: float = Field(ge=0, description="sigma_P; 0 for an opted-out pool")
    noise_std: float = Field(ge=0, description="sigma_P * C: std of the noise in the pool sum")
    keep_ratio: float = Field(gt=0, le=1, description="kappa_P = k_P / d")
    expected_clients: float
    secagg_threshold: int = Field(ge=1, description="m_P: the sum is unmasked only with >= m_P survivors")
    noise_share_std: float = Field(ge=0, description="each sampled client adds N(0, noise_share_std^2)")
    abort_probability: float = Field(ge=0, le=1, description="P(survivors < m_P) in one round")
    expected_noise_inflation: float = Field(description="E[survivors] / m_P")
    # The secure-aggregation graph stated at the expected pool size (planner.secagg.secagg_graph,
    # docs/secure-aggregation.md §SecAgg). null in plans written before these fields existed.
    secagg_mode: SecaggMode | None = Field(
        None, description="full (complete graph) or sparse (SecAgg+), as chosen by --secagg auto"
    )
    secagg_participants: int | None = Field(None, description="n: the pool size the graph is stated for")
    secagg_neighbours: int | None = Field(None, description="SecAgg+ Harary degree k (sparse only)")
    secagg_share_threshold: int | None = Field(None, description="t: each share group's Shamir threshold (sparse only)")
    secagg_corrupt_fraction: float | None = Field(None, description="gamma: corrupt clients Bell et al.'s bounds assume")
    secagg_dropout_fraction: float | None = Field(None, description="delta: dropouts the graph tolerates")
    # Adaptive clipping (docs/planning.md §15); null without an adaptive_clip block. noise_multiplier
    # stays z_eff, the multiplier the ledger composes.
    update_noise_multiplier: float | None = Field(
        None, ge=0, description="adaptive clipping: sigma_Delta, the update sum's noise std over the round's clip S^t"
    )
    count_noise_std: float | None = Field(
        None, ge=0, description="adaptive clipping: sigma_b, the noise std on the pool's count of unclipped clients"
    )
    discrete: DiscreteMechanism | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="secagg_mechanism skellam: the distributed Skellam calibration for this pool's budget (what "
        "gdpfed train runs under the skellam mechanism and its ledger counts); left out of the JSON otherwise",
    )


class ClientsForNoiseToSignal(NumbersModel):
    """How large the federation must be for the plan's noise-to-signal ratio to reach ``target``.

    Every group's size and K scaled by one factor, the plan's design (rates, pools, keep
    ratios, so its noise multipliers and epsilons) kept (docs/planning.md §13).
    """

    target: float = Field(description="noise-to-signal ratio to reach")
    expected_clients: float | None = Field(None, description="K of the smallest scale at which the plan's design reaches it")
    total_clients: int | None = Field(None, description="its population (all groups scaled alike)")
    noise_to_signal: float | None = Field(None, description="the design's ratio at that scale (<= target)")
    note: str | None = Field(None, description="why no size is given, or how the search ended")


class FedHDPPrediction(NumbersModel):
    """FedHDP's advisory ratios for this plan (docs/planning.md §14): post-processing, no
    privacy number changes."""

    ratios: dict[str, float] = Field(description="pool id -> r_P* (1 for pools without noise)")
    aggregation_weights: dict[str, float] = Field(description="group id -> r_P q_g N_g / sum_P r_P K_P")
    noise_energy: float = Field(description="d sum_P kappa_P r_P^2 s_P^2 / (sum_P r_P K_P)^2 with these ratios")


class DittoLambdaPrediction(NumbersModel):
    """Ditto's advisory lambda* per group on FedHDP's point-estimation model (docs/planning.md
    §14): a local choice of each client, no privacy number depends on it."""

    lambdas: dict[str, float | None] = Field(
        description="group id -> lambda* (null where no finite lambda is optimal or the group is never sampled)"
    )
    assumed_ratios: dict[str, float] = Field(
        description="pool id -> the server ratio r_P = min_k sigma2_k / sigma2_P under which these lambda* are "
        "optimal (inverse-variance weights; with other ratios no lambda is Bayes-optimal)"
    )
    client_variance: dict[str, float] = Field(
        description="pool id -> sigma2_P = alpha^2 + tau^2 + s_P^2 / K_P: a participating client's variance per "
        "coordinate (local estimate, heterogeneity, and its share of the pool's noise)"
    )
    assumptions: str = Field(description="the model and conditions these numbers hold under")


class Predicted(NumbersModel):
    """The objective's terms at the plan (docs/planning.md §3) and its learnability (§13)."""

    noise_energy: float = Field(description="(d C^2 / K^2) * sum_P kappa_P sigma_P^2")
    sparsification_error: float = Field(description="bias_weight U^2 sum_g p_g (1 - kappa_P(g))^beta")
    objective: float
    noise_to_signal: float | None = Field(
        None,
        description="sqrt(d sum_P kappa_P I_P s_P^2) / sum_g q_g N_g C_g: the aggregated noise's norm over "
        "the largest aggregated update (docs/planning.md §13); above 1 the model is unlikely to learn",
    )
    clients_needed: list[ClientsForNoiseToSignal] = Field(
        default_factory=list,
        description="the smallest K and population (all groups scaled alike) at which this plan's design brings the "
        "ratio to 1 and to 0.1 (empty when not computed: re-plans, comparison rows)",
    )
    fedhdp: FedHDPPrediction | None = Field(
        None, description="FedHDP's ratios r* and their aggregation weights (scenarios with update_dispersion)"
    )
    ditto_lambdas: DittoLambdaPrediction | None = Field(
        None,
        description="Ditto's advisory lambda* per group (scenarios with sampling_variance_per_coordinate and "
        "heterogeneity_variance_per_coordinate)",
    )


class ComparisonPool(NumbersModel):
    """One pool of a comparison row: which groups share its noise draw, and that noise."""

    id: str
    groups: list[str]
    noise_multiplier: float = Field(description="sigma_P")
    keep_ratio: float = Field(description="kappa_P = k_P / d")


class ComparisonRow(NumbersModel):
    """One method in a ``compare`` plan: the paper's noise table, one row (docs/planning.md §10).

    A row is self-contained: its pools name their groups, and it carries each group's
    verified epsilon, the accountant that calibrated and verified it, and the method's warnings.
    """

    method: PlanMethod
    feasible: bool
    private: bool = Field(True, description="false for nonprivate (a baseline with no DP at all)")
    recommended: bool = False
    accountant: AccountantName | None = Field(
        None, description="accountant of this row's sigmas and epsilon_spent (prv compares rank on rdp)"
    )
    error: str | None = None
    pools: list[ComparisonPool] = Field(default_factory=list)
    noise_multipliers: dict[str, float] = Field(default_factory=dict, description="pool id -> sigma_P")
    sampling_rates: dict[str, float] = Field(default_factory=dict, description="group id -> q_g")
    expected_clients: dict[str, float] = Field(default_factory=dict, description="group id -> q_g N_g")
    keep_ratios: dict[str, float] = Field(default_factory=dict, description="pool id -> kappa_P")
    epsilon_spent: dict[str, float | None] = Field(
        default_factory=dict, description="group id -> epsilon over all rounds: the recommended row's is the plan's "
        "(under skellam its blocks'), every other row's the verification of its design's Gaussian phases; null = no DP"
    )
    mechanism: SecaggMechanism | None = Field(
        None, description="the mechanism this row's epsilon_spent is the figure of: the recommended row's is the "
        "plan's (skellam where its blocks price its groups), every other row's gaussian_continuous; null: an "
        "infeasible row, nonprivate (no figures), or a document written before the field"
    )
    noise_energy: float | None = None
    sparsification_error: float | None = None
    objective: float | None = None
    warnings: list[str] = Field(default_factory=list)
    noise_to_signal: float | None = Field(None, description="predicted.noise_to_signal of the method's plan")


class Recommendation(NumbersModel):
    """compare's answer: the feasible private method with the lowest objective J."""

    method: PlanMethod
    objective: float
    reason: str


def read_version_1(data: Any) -> Any:
    """A schema_version 1 document as version 2: every version-1 plan is client-level
    (docs/planning.md §8.1)."""
    if isinstance(data, dict) and data.get("schema_version") == 1:
        return {**data, "schema_version": SCHEMA_VERSION, "privacy_unit": data.get("privacy_unit", "client")}
    return data


# (field path in the plan, the value the plan states, the value its scenario fixes)
FixedField = tuple[str, Any, Any]


class PlanDocument(NumbersModel):
    """What every kind of plan carries: the contract's common part.

    ``privacy_unit`` says whom the plan's figures protect and selects the model that
    reads the rest (``planner.units``); each kind narrows it to its own name. Figures of
    different units are different privacy notions and are never added or compared.
    """

    schema_version: Literal[2] = SCHEMA_VERSION
    privacy_unit: str = Field(description="whom the plan protects (a name in the planner.units registry)")
    method: str
    rounds: int = Field(ge=0, description="rounds this plan covers (scenario.rounds - start_round)")
    start_round: int = Field(0, ge=0, description="global round index this plan starts at")
    parent_plan_id: str | None = None
    warnings: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _read_version_1(cls, data: Any) -> Any:
        return read_version_1(data)

    def scenario_fixed(self) -> Iterator[FixedField]:
        """The fields of this plan that its own ``scenario`` fixes, as ``(field, stated,
        fixed)``: the path the plan names the field by, the value the document states and
        the one its scenario gives (docs/ledger.md §5). Each plan kind declares its own;
        ``check_scenario_fixed`` refuses a document that states anything else. A generator,
        so a list of ids is compared before the entries that look ids up."""
        return iter(())

    def pool_ids(self) -> set[str]:
        """Ids of the plan's noise pools, which a round report may name as aborted
        (docs/ledger.md §4); plans of units without pools have none."""
        return set()

    def remaining_rounds(self, rounds_done: int, total_rounds: int, *, field: str = "rounds_done",
                         advice: str = "") -> tuple[int, int]:
        """``(start, remaining)`` of a re-plan after ``rounds_done`` of this plan's rounds, for
        every privacy unit (docs/planning.md §9): the child starts at the global round ``start =
        start_round + rounds_done`` and covers ``remaining = total_rounds - start`` rounds.

        ``rounds_done`` must be an integer (not a bool) from 0 to ``rounds``, else
        ``InvalidInputError("rounds_done")``. No round remaining is ``InvalidInputError(field)``,
        its message ending in ``advice``: a client plan's changes may raise the total
        (``changes.rounds``), a silo or metric plan's cannot, so theirs names ``rounds_done``."""
        if isinstance(rounds_done, bool) or not isinstance(rounds_done, int) or not 0 <= rounds_done <= self.rounds:
            raise InvalidInputError("rounds_done", f"must be an integer from 0 to the plan's {self.rounds} rounds")
        start = self.start_round + rounds_done
        if total_rounds - start < 1:
            raise InvalidInputError(field, f"no rounds remain: {start} of {total_rounds} have run{advice}")
        return start, total_rounds - start


class Plan(PlanDocument):
    """A client-level plan document: what the trainer executes and the service stores.

    Groups of clients with their own budgets, pools with one Gaussian noise draw each,
    Poisson sampling rates per group (docs/planning.md §8).
    """

    privacy_unit: Literal["client"] = Field(
        "client", description="client-level DP: each group's epsilon bounds what one client's data reveals"
    )
    method: PlanMethod
    accountant: AccountantName
    scenario: Scenario
    groups: list[GroupPlan]
    pools: list[PoolPlan]
    predicted: Predicted
    comparison: list[ComparisonRow] | None = None
    recommendation: Recommendation | None = None

    @model_validator(mode="before")
    @classmethod
    def _mechanism_of_an_older_plan(cls, data: Any) -> Any:
        """A plan document whose scenario names no ``secagg_mechanism`` was written before the
        field existed: it ran the continuous Gaussian (the default then) unless it states
        discrete blocks (``report_discrete: true``), so it reads as that, not as today's
        default (docs/secure-aggregation.md §Discrete noise, "Old plans and scenarios")."""
        if not isinstance(data, dict) or not isinstance(data.get("scenario"), dict):
            return data
        scenario = data["scenario"]
        if "secagg_mechanism" in scenario:
            return data
        pools = data.get("pools")
        stated = scenario.get("report_discrete") is True or (
            isinstance(pools, list) and any(isinstance(p, dict) and p.get("discrete") is not None for p in pools)
        )
        mechanism = "skellam" if stated else "gaussian_continuous"
        return {**data, "scenario": {**scenario, "secagg_mechanism": mechanism}}

    def pool_ids(self) -> set[str]:
        return {pool.id for pool in self.pools}

    def scenario_fixed(self) -> Iterator[FixedField]:
        """What a client-level plan's scenario fixes (docs/ledger.md §5): the rounds it covers
        (``scenario.rounds - start_round``), the accountant, the groups (ids, in order) and each
        group's epsilon, client count and clip norm (the group's own, else the scenario's).
        ``idp_scale`` derives its noisy groups' clip norms from the pool's noise
        (docs/planning.md §2), so there the scenario fixes no clip norm; the verifier checks
        them against the noise instead."""
        scenario = self.scenario
        yield "rounds", self.rounds, scenario.rounds - self.start_round
        yield "accountant", self.accountant, scenario.accountant
        yield "groups", [g.id for g in self.groups], [g.id for g in scenario.groups]
        private = [g.epsilon for g in scenario.groups if g.epsilon is not None]
        for group in self.groups:
            spec = scenario.group(group.id)
            field = f"groups.{group.id}"
            fixed_epsilon = spec.epsilon
            if fixed_epsilon is None and self.method == "dp_fedavg_all" and private:
                # that baseline plans opted-out groups private at the strictest budget
                # (planner/methods/dp_fedavg_all.py, docs/planning.md §2): never looser
                fixed_epsilon = min(private)
            yield f"{field}.epsilon", group.epsilon, fixed_epsilon
            yield f"{field}.num_clients", group.num_clients, spec.num_clients
            if self.method != "idp_scale":
                yield f"{field}.clip_norm", group.clip_norm, spec.clip_norm if spec.clip_norm is not None else scenario.clip_norm

    def pool(self, pool_id: str) -> PoolPlan:
        for pool in self.pools:
            if pool.id == pool_id:
                return pool
        raise KeyError(pool_id)

    def group(self, group_id: str) -> GroupPlan:
        for group in self.groups:
            if group.id == group_id:
                return group
        raise KeyError(group_id)


class GroupChange(_Strict):
    """An operator's change to one group, applied at re-planning.

    Unset fields keep their value. ``epsilon`` may be set to a new positive budget; a new
    group id adds a group (then ``epsilon`` and ``num_clients`` are required);
    ``remove: true`` drops the group from the remaining rounds (its history is kept).
    """

    id: GroupId
    epsilon: Epsilon | None = None
    opt_out: Flag = Field(False, description="set the group's epsilon to null (no DP) from now on")
    num_clients: int | None = Field(None, ge=1, le=10**9)
    keep_ratio: KeepRatio | None = None
    remove: Flag = False


class Changes(_Strict):
    """Budget and membership changes for re-planning (docs/planning.md §9)."""

    groups: list[GroupChange] = Field(default_factory=list)
    expected_clients: ClientCount | None = None
    rounds: RoundCount | None = Field(None, description="new total round count (default: unchanged)")

    @field_validator("groups")
    @classmethod
    def _each_group_once(cls, groups: list[GroupChange]) -> list[GroupChange]:
        # a group named twice (epsilon 2, then epsilon 3) is refused rather than read as its
        # last entry, as a JSON key given twice is (docs/planning.md §9); silo and metric
        # changes refuse theirs the same way
        if (repeated := first_repeated(change.id for change in groups)) is not None:
            raise ValueError(f"group {repeated!r} is changed twice: give each group's change once")
        return groups


def current_plan_data(data: Any) -> dict[str, Any]:
    """A plan document of any readable schema version as the current version's data
    (version 1 read as a client plan, docs/planning.md §8.1), or ``InvalidInputError``
    naming the version or the missing unit. ``planner.units.load_plan_document`` then reads
    it with its unit's plan model."""
    if not isinstance(data, dict):
        raise InvalidInputError("plan", "a plan document must be a JSON object")
    version = data.get("schema_version")
    if version is None:
        raise InvalidInputError("schema_version", "missing: this is not a gdpfed plan document")
    if version not in READABLE_SCHEMA_VERSIONS:
        raise InvalidInputError(
            "schema_version",
            f"plan schema version {version!r} is not supported (this gdpfed reads versions "
            f"{', '.join(map(str, READABLE_SCHEMA_VERSIONS))}); re-create the plan with this release",
        )
    if version == 1 and data.get("privacy_unit", "client") != "client":
        raise InvalidInputError("privacy_unit", "schema version 1 plans are client-level; this document is inconsistent")
    data = read_version_1(data)
    if "privacy_unit" not in data:
        raise InvalidInputError("privacy_unit", f"missing: a schema version {version} plan names its privacy unit")
    return data


def check_scenario_fixed(plan: PlanDocument) -> None:
    """Refuse a plan that states a value other than its own scenario's for a field the
    scenario fixes (``plan.scenario_fixed()``: budgets, client counts, rounds, clip norms,
    the accountant; docs/ledger.md §5): ``InvalidInputError`` naming the field,
    ``groups.strict.epsilon: states 10, but the plan's scenario fixes 1``. Every plan read
    (``planner.units.load_plan_document``) and every unit's verifier runs it, so a budget shown or
    checked is the scenario's."""
    for field, stated, fixed in plan.scenario_fixed():
        if stated != fixed:  # exact: the planner copies these values from the scenario
            raise InvalidInputError(field, stated_differs(stated, fixed, "the plan's scenario fixes"))


def stated_differs(stated: Any, expected: Any, source: str) -> str:
    """``states 10, but <source> 1``: one sentence for a document's field that is not what
    ``source`` gives (numbers as written, text quoted, null for none)."""
    return f"states {_shown(stated)}, but {source} {_shown(expected)}"


def _shown(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, float):
        short = f"{value:.12g}"
        return short if float(short) == value else repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_shown(item) for item in value) + "]"
    if isinstance(value, str):
        return repr(value)
    return str(value)


def require_client_plan(plan: PlanDocument, user: str = "this command") -> Plan:
    """``plan`` if it is client-level; otherwise ``InvalidInputError("privacy_unit")``
    saying that ``user`` runs client-level plans only."""
    if isinstance(plan, Plan):
        return plan
    raise InvalidInputError(
        "privacy_unit",
        f"{user} runs client-level plans only; this plan's privacy_unit is {plan.privacy_unit!r}",
    )
