"""The ``silo_sample`` unit: silo-specific sample-level (epsilon_k, delta)-DP (cross-silo FL).

(docs/mrmtl.md §1-§2.) Each silo protects its own data subjects: every model silo k
releases is (epsilon_k, delta)-DP with respect to adding or removing one of silo k's
examples. Privacy is spent only by queries to a silo's data: its DP-SGD steps
(Poisson(q_k = B / n_k) sampling of examples, per-example clip ``c``, Gaussian noise
``sigma_k c`` on the clipped sum) and, for ``ifca_mrmtl``, its private cluster selections
(exponential mechanism, ``epsilon_sel^2 / 8``-zCDP each). Every silo takes part in every
round; what the server does with the released models is post-processing.

The planner calibrates ``sigma_k`` per silo on ``rounds * steps_per_round_k`` steps with
the scenario's accountant (the selections' zCDP included), then verifies each silo's
final epsilon with the ledger's accountant. ``steps_per_round_k`` is
``overhead * local_epochs * ceil(n_k / B)`` (overhead 2 for Ditto's two passes, 1
otherwise) unless the scenario fixes ``steps_per_round``. The figures are a different
privacy notion from client-level DP and are labelled ``NOTION`` wherever shown.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Annotated, Any, Final, Literal, get_args

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from accounting.accountants import DEFAULT_ACCOUNTANT, RDP_ACCOUNTANT, TIGHT_ACCOUNTANT, AccountantName, get_accountant
from accounting.calibration import noise_multiplier
from accounting.choices import SecaggMechanism
from accounting.errors import BudgetConflictError, InvalidInputError, located_validation_error
from accounting.events import PoissonSampledGaussian, PrivacyEvent, ZeroConcentratedDp
from accounting.validation import InputModel, NumbersModel
from planner import ledger
from planner import mean_estimation as toy
from planner.ledger import EpsilonFn
from planner.schema import (
    Epsilon,
    FixedField,
    GroupId,
    Norm,
    PlanDocument,
    check_scenario_fixed,
    first_repeated,
    stated_differs,
)
from planner.service_api import SiloLedger, SiloLedgerOut
from planner.units.base import Participations, PrivacyUnit
from planner.verify import UnderstatedFigure

NAME: Final = "silo_sample"
NOTION: Final = "silo-specific sample-level (epsilon, delta)-DP per silo (add/remove one example of the silo)"
MECHANISM: Final = "dpsgd_silo"

# The silo methods, one list: SILO_METHODS is its values (the unit registry's, the experiments';
# OVERHEAD's keys and the trainer's SILO_STRATEGIES are held equal to it by
# tests/trainer/test_silo_methods.py).
SiloMethod = Literal["mrmtl", "local", "fedavg", "finetune", "ditto", "ifca_mrmtl"]
SILO_METHODS: Final[tuple[str, ...]] = get_args(SiloMethod)
# DP-SGD passes over the silo's data per round (docs/mrmtl.md §2): Ditto trains a global
# and a personal model, each with its own DP-SGD steps.
OVERHEAD: Final[dict[str, int]] = {
    "mrmtl": 1, "local": 1, "fedavg": 1, "finetune": 1, "ditto": 2, "ifca_mrmtl": 1,
}
# The planner's verification slack: rounding of JSON numbers only (as planner.verify).
VERIFY_SLACK = 1e-9
Delta = Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)]
Variance = Annotated[float, Field(gt=0, le=1e12, allow_inf_nan=False)]


# Start-up time: this unit's models build their validators on first use (defer_build), so a
# `gdpfed plan` of a client scenario, which never reads a silo document, does not pay for them.
_DEFERRED = ConfigDict(defer_build=True)


class _Strict(InputModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


# The smallest sampling rate B / n_k a silo plan accepts: below it the RDP curve of
# accounting.rdp loses precision and under-states epsilon (q = 1e-8 gave epsilon 0).
MIN_SAMPLING_RATE: Final = 1e-6


class SiloSpec(_Strict):
    """One silo: its number of training examples and its own budget."""

    id: GroupId
    num_samples: int = Field(ge=1, le=10**9, description="n_k: the silo's training examples")
    epsilon: Epsilon = Field(description="epsilon_k: sample-level budget of this silo's examples")


class SiloScenario(_Strict):
    """A cross-silo scenario: silos with their sizes and budgets, and the DP-SGD settings."""

    privacy_unit: Literal["silo_sample"] = Field(
        NAME, description="whom the budgets protect: each silo's examples (sample-level DP per silo)"
    )
    silos: list[SiloSpec] = Field(min_length=1, max_length=100_000)
    delta: Delta
    rounds: int = Field(ge=1, le=10**6)
    batch_size: int = Field(ge=1, le=10**7, description="B: expected DP-SGD batch; q_k = B / n_k")
    local_epochs: int = Field(1, ge=1, le=1000, description="DP-SGD epochs per round (steps ceil(n_k/B) each)")
    steps_per_round: int | None = Field(
        None, ge=1, le=10**6, description="DP-SGD steps per pass and round for every silo (null: local_epochs * ceil(n_k / B))"
    )
    clip_norm: Norm = Field(1.0, description="c: per-example L2 clip norm")
    accountant: AccountantName = DEFAULT_ACCOUNTANT
    clusters: int = Field(4, ge=1, le=1000, description="ifca_mrmtl: cluster models")
    warm_start_fraction: float = Field(
        0.1, gt=0, le=1, description="ifca_mrmtl: share of rounds (rounded up) with private cluster selection"
    )
    selection_epsilon_fraction: float = Field(
        0.03, gt=0, lt=1, description="ifca_mrmtl: epsilon of one selection as a share of the silo's epsilon"
    )
    data_variance: Variance | None = Field(None, description="sigma^2 of the mean-estimation proxy (advisory lambda*)")
    task_variance: Variance | None = Field(None, description="tau^2 of the mean-estimation proxy (advisory lambda*)")

    @field_validator("silos")
    @classmethod
    def _unique(cls, silos: list[SiloSpec]) -> list[SiloSpec]:
        if (repeated := first_repeated(silo.id for silo in silos)) is not None:
            raise ValueError(f"silo id {repeated!r} appears twice")
        return silos

    @field_validator("batch_size")
    @classmethod
    def _batch_fits(cls, batch_size: int, info: ValidationInfo) -> int:
        # a field validator (silos are validated before it) so the error names batch_size
        for silo in info.data.get("silos", []):
            if batch_size > silo.num_samples:
                raise ValueError(
                    f"batch_size {batch_size} exceeds silo {silo.id}'s {silo.num_samples} examples "
                    "(the sampling rate B / n_k would exceed 1)"
                )
            if batch_size / silo.num_samples < MIN_SAMPLING_RATE:
                # the subsampled-Gaussian RDP curve loses its precision below this rate (log A with
                # A - 1 under double precision): it under-states epsilon, down to 0
                raise ValueError(
                    f"batch_size {batch_size} gives silo {silo.id} ({silo.num_samples} examples) a sampling rate "
                    f"B / n_k = {batch_size / silo.num_samples:.3g}, below {MIN_SAMPLING_RATE:g}, where the "
                    "accountants are not accurate; use a larger batch"
                )
        return batch_size

    @model_validator(mode="after")
    def _variances_together(self) -> SiloScenario:
        if (self.data_variance is None) != (self.task_variance is None):
            missing = "task_variance" if self.task_variance is None else "data_variance"
            raise located_validation_error("SiloScenario", [(
                (missing,), "missing: give data_variance and task_variance together (or neither)", None)])
        return self

    def passes_steps(self, silo: SiloSpec) -> int:
        """DP-SGD steps of one pass over the silo in one round."""
        if self.steps_per_round is not None:
            return self.steps_per_round
        return self.local_epochs * -(-silo.num_samples // self.batch_size)


class SiloPlan(NumbersModel):
    """One silo's mechanism: what the DP-SGD engine runs and the ledger counts."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    id: GroupId
    num_samples: int
    epsilon: float = Field(description="the silo's sample-level budget")
    sampling_rate: float = Field(description="q_k = B / n_k: Poisson rate of each example per step")
    steps_per_round: int = Field(description="DP-SGD steps per round, all passes (overhead included)")
    noise_multiplier: float = Field(description="sigma_k: noise std of a step's clipped sum is sigma_k * clip_norm")
    clip_norm: float = Field(description="c: per-example L2 clip norm")
    selection_epsilon: float | None = Field(None, description="ifca_mrmtl: epsilon of one cluster selection")
    selection_rounds: int = Field(0, description="rounds with one private cluster selection (the first ones)")
    epsilon_planned: float = Field(description="epsilon after every round, by the ledger's accountant")
    epsilon_rdp: float | None = Field(
        None, description="the same history's epsilon under rdp (docs/ledger.md §3); null in plans written before"
    )
    epsilon_tight: float | None = Field(
        None, description="the same history's epsilon under the tight accountant, pld (rdp's where pld cannot "
        "represent a cluster selection); null in plans written before"
    )
    random_walk_variance_per_lr2: float = Field(
        description="(sigma_k c / B)^2 * steps over all rounds: variance of the accumulated DP noise per "
        "coordinate per unit learning rate squared (a large value is what averaging across silos reduces)"
    )
    lambda_star: float | None = Field(None, description="advisory silo-specific lambda_k* of the mean-estimation proxy")
    # a plan from round 0 has no history: left out, its document is as before re-plans existed
    spent_phases: list[PoissonSampledGaussian] = Field(
        default_factory=list, exclude_if=lambda phases: not phases,
        description="DP-SGD steps the silo ran under parent plans (a re-plan's history)",
    )
    spent_selections: list[ZeroConcentratedDp] = Field(
        default_factory=list, exclude_if=lambda selections: not selections,
        description="cluster selections the silo ran under parent plans",
    )

    def spent_events(self) -> list[PrivacyEvent]:
        """What the silo spent before this plan's first round (its parents' rounds)."""
        return [*self.spent_phases, *self.spent_selections]


class MeanEstimationAdvice(NumbersModel):
    """The advisory lambda* of the mean-estimation proxy (docs/mrmtl.md §3.2)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    lambda_star_uniform: float = Field(description="sigma_loc^2 / tau^2 at the silos' mean sigma_loc^2")
    local_variance: dict[str, float] = Field(description="sigma_loc,k^2 per silo")
    dp_noise_std: dict[str, float] = Field(description="sigma_dp,k: std of the silo's one-shot private sum")
    note: str


class SiloSamplePlan(PlanDocument):
    """A cross-silo plan: every silo's DP-SGD mechanism and its sample-level guarantee."""

    model_config = _DEFERRED

    privacy_unit: Literal["silo_sample"] = Field(NAME, description=NOTION)
    method: SiloMethod
    notion: Literal["silo-specific sample-level (epsilon, delta)-DP per silo (add/remove one example of the silo)"] = NOTION
    accountant: AccountantName
    scenario: SiloScenario
    overhead: int = Field(ge=1, description="DP-SGD passes per round (2 for ditto)")
    batch_size: int = Field(description="B: expected batch size of every silo")
    silos: list[SiloPlan]
    advice: MeanEstimationAdvice | None = None

    def scenario_fixed(self) -> Iterator[FixedField]:
        """What a silo plan's scenario fixes (docs/mrmtl.md §2): its rounds, accountant and
        batch, the silos (ids, in order) and each silo's examples, budget and clip norm."""
        scenario = self.scenario
        yield "rounds", self.rounds, scenario.rounds - self.start_round
        yield "accountant", self.accountant, scenario.accountant
        yield "batch_size", self.batch_size, scenario.batch_size
        yield "silos", [s.id for s in self.silos], [s.id for s in scenario.silos]
        for silo, spec in zip(self.silos, scenario.silos):
            yield f"silos.{silo.id}.num_samples", silo.num_samples, spec.num_samples
            yield f"silos.{silo.id}.epsilon", silo.epsilon, spec.epsilon
            yield f"silos.{silo.id}.clip_norm", silo.clip_norm, scenario.clip_norm

    def silo(self, silo_id: str) -> SiloPlan:
        for silo in self.silos:
            if silo.id == silo_id:
                return silo
        raise KeyError(silo_id)


def selection_rounds(scenario: SiloScenario, method: str, start_round: int = 0) -> int:
    """Rounds with a private cluster selection: ceil(warm_start_fraction * rounds) for ifca_mrmtl,
    less the ``start_round`` rounds a re-plan's parents ran."""
    if method != "ifca_mrmtl":
        return 0
    total = min(scenario.rounds, math.ceil(scenario.warm_start_fraction * scenario.rounds - 1e-9))
    return max(0, total - start_round)


def silo_history(plan: SiloSamplePlan, silo: SiloPlan, rounds_run: int) -> list[PrivacyEvent]:
    """Silo k's events after ``rounds_run`` rounds (docs/mrmtl.md §2): what it spent under
    parent plans (a re-plan's history), its DP-SGD steps
    ``Phase(q_k, sigma_k, steps_per_round * rounds_run)`` and, in the first
    ``selection_rounds`` rounds, one ``epsilon_sel^2/8``-zCDP selection per round."""
    if not 0 <= rounds_run <= plan.rounds:
        raise InvalidInputError("rounds_run", f"must be from 0 to the plan's {plan.rounds} rounds, got {rounds_run}")
    events: list[PrivacyEvent] = silo.spent_events()
    if rounds_run > 0:
        events.append(PoissonSampledGaussian(
            sampling_rate=silo.sampling_rate, noise_multiplier=silo.noise_multiplier,
            steps=silo.steps_per_round * rounds_run,
        ))
    selections = min(rounds_run, silo.selection_rounds)
    if selections > 0 and silo.selection_epsilon is not None:
        events.append(ZeroConcentratedDp.exponential_mechanism(silo.selection_epsilon, selections))
    return events


def silo_epsilon_spent(
    plan: SiloSamplePlan, silo: SiloPlan, rounds_run: int, *, per_round: bool = False,
    epsilon_fn: EpsilonFn | None = None,
) -> float:
    """Silo k's sample-level epsilon after ``rounds_run`` rounds (``planner.ledger``'s accountant)."""
    return ledger.history_epsilon(
        silo_history(plan, silo, rounds_run), plan.scenario.delta, plan.accountant,
        per_round=per_round, epsilon_fn=epsilon_fn,
    )


def spent(plan: SiloSamplePlan, rounds_run: int) -> dict[str, float | None]:
    """Each silo's sample-level epsilon after ``rounds_run`` rounds (the unit's ledger)."""
    return {silo.id: silo_epsilon_spent(plan, silo, rounds_run) for silo in plan.silos}


def _calibrate(
    scenario: SiloScenario, silo: SiloSpec, method: str, start_round: int = 0, spent: list[PrivacyEvent] | None = None,
) -> tuple[float, int, float | None, int]:
    """(sigma_k, steps per round, selection epsilon, selection rounds) for one silo's rounds
    from ``start_round`` on, after the ``spent`` events of its parent plans."""
    steps = OVERHEAD[method] * scenario.passes_steps(silo)
    selections = selection_rounds(scenario, method, start_round)
    selection_epsilon = scenario.selection_epsilon_fraction * silo.epsilon if selections else None
    spent_events = list(spent or [])
    if selection_epsilon:
        spent_events.append(ZeroConcentratedDp.exponential_mechanism(selection_epsilon, selections))
    calibration = noise_multiplier(
        scenario.batch_size / silo.num_samples, (scenario.rounds - start_round) * steps, silo.epsilon,
        scenario.delta, scenario.accountant, spent=spent_events,
    )
    return float(calibration.noise_multiplier), steps, selection_epsilon, selections


def _advice(scenario: SiloScenario) -> tuple[MeanEstimationAdvice | None, dict[str, float]]:
    """The mean-estimation proxy's lambda* (docs/mrmtl.md §3.2): each silo's one-shot
    private sum (rate 1, one step, clip c) at its own budget gives sigma_dp,k."""
    if scenario.data_variance is None or scenario.task_variance is None:
        return None, {}
    # advisory only (no budget rests on it): the fast sound accountant for the scenario's
    accountant = get_accountant(scenario.accountant).per_round
    dp_std: dict[str, float] = {}
    local: dict[str, float] = {}
    for silo in scenario.silos:
        sigma = noise_multiplier(1.0, 1, silo.epsilon, scenario.delta, accountant).noise_multiplier
        dp_std[silo.id] = float(sigma) * scenario.clip_norm
        local[silo.id] = toy.local_variance(scenario.data_variance, silo.num_samples, dp_std[silo.id])
    mean_local = sum(local.values()) / len(local)
    per_silo: dict[str, float] = {}
    if len(local) >= 2:
        stars, _ = toy.silo_optimal_prox(list(local.values()), scenario.task_variance)
        per_silo = {silo_id: float(value) for silo_id, value in zip(local, stars)}
    advice = MeanEstimationAdvice(
        lambda_star_uniform=toy.optimal_prox(mean_local, scenario.task_variance),
        local_variance=local,
        dp_noise_std=dp_std,
        note="advisory: Bayes-optimal prox weight of MR-MTL for personalised mean estimation with these "
        "variances (paper section 6); lambda_k* assumes the server weights silos by 1/(tau^2 + sigma_loc,k^2)",
    )
    return advice, per_silo


def make_plan(
    scenario: SiloScenario, method: str, *, start_round: int = 0,
    spent: dict[str, list[PrivacyEvent]] | None = None, parent_plan_id: str | None = None,
) -> SiloSamplePlan:
    """Plan every silo's DP-SGD mechanism for ``method`` and verify it (docs/mrmtl.md §2).

    A re-plan (``replan``) passes the round it starts at and each silo's ``spent`` events
    under its parents: every silo is calibrated for the remaining rounds so that what it
    spent plus what it will spend stays within its (new) budget (docs/mrmtl.md §6)."""
    if method not in SILO_METHODS:
        raise InvalidInputError("method", f"silo_sample plans take one of {', '.join(SILO_METHODS)}, got {method!r}")
    advice, stars = _advice(scenario)
    remaining = scenario.rounds - start_round
    silos: list[SiloPlan] = []
    for spec in scenario.silos:
        history = list((spent or {}).get(spec.id, []))
        sigma, steps, selection_epsilon, selections = _calibrate(scenario, spec, method, start_round, history)
        silos.append(SiloPlan(
            id=spec.id, num_samples=spec.num_samples, epsilon=spec.epsilon,
            sampling_rate=scenario.batch_size / spec.num_samples, steps_per_round=steps,
            noise_multiplier=sigma, clip_norm=scenario.clip_norm,
            selection_epsilon=selection_epsilon, selection_rounds=selections,
            epsilon_planned=0.0,  # filled in below by the ledger
            random_walk_variance_per_lr2=(sigma * scenario.clip_norm / scenario.batch_size) ** 2
            * steps * remaining,
            lambda_star=stars.get(spec.id),
            spent_phases=[e for e in history if isinstance(e, PoissonSampledGaussian)],
            spent_selections=[e for e in history if isinstance(e, ZeroConcentratedDp)],
        ))
    plan = SiloSamplePlan(
        method=method,  # checked against SILO_METHODS above
        rounds=remaining, start_round=start_round, parent_plan_id=parent_plan_id,
        accountant=scenario.accountant, scenario=scenario,
        overhead=OVERHEAD[method], batch_size=scenario.batch_size, silos=silos, advice=advice,
    )
    for silo in plan.silos:
        silo.epsilon_planned = silo_epsilon_spent(plan, silo, plan.rounds)
    figures = ledger.epsilon_figures(
        [silo_history(plan, silo, plan.rounds) for silo in plan.silos], scenario.delta,
        {ledger.ledger_accountant(plan.accountant): [silo.epsilon_planned for silo in plan.silos]},
    )
    for silo, both in zip(plan.silos, figures, strict=True):
        silo.epsilon_rdp, silo.epsilon_tight = both
    verify(plan, understated=None)  # the figures were just composed from the same histories
    return plan


def verify(
    plan: SiloSamplePlan, *, epsilon_fn: EpsilonFn | None = None,
    understated: Literal["refuse", "report"] | None = "refuse",
) -> list[UnderstatedFigure]:
    """Re-derive every silo's mechanism from the scenario and check its budget (docs/mrmtl.md §2).

    Nothing the document says is trusted: every field the scenario fixes must state the
    scenario's value (``SiloSamplePlan.scenario_fixed``: rounds, accountant, batch, the
    silos in order, each silo's examples, budget and clip norm); ``q_k = B / n_k``,
    ``steps_per_round`` and the selections must be what the method runs; ``sigma_k > 0``;
    and the silo's epsilon after every round, by the ledger's accountant, must be within
    ``epsilon_k (1 + 1e-9)``. ``InvalidInputError`` names the field.

    The stated figures (``epsilon_planned``, and ``epsilon_rdp`` / ``epsilon_tight`` where
    stated: null claims nothing) may not be below their recomputation from the same history
    (relative 1e-9), as a client plan's (``planner.verify`` step 6, docs/ledger.md §5): one
    below is refused (``understated="refuse"``: the plan checker, ``gdpfed plan verify``) or
    returned (``"report"``: ``gdpfed train``, whose ledger counts its own figures and warns);
    ``None`` skips the comparison (the planner, which has just computed them from the same
    histories). Returns the figures found below (empty when refused or skipped).
    """
    scenario = plan.scenario
    check_scenario_fixed(plan)
    if plan.start_round == 0 and any(silo.spent_events() for silo in plan.silos):
        raise InvalidInputError("start_round", "a plan starting at round 0 has no parents, so no silo spent anything before it")
    if plan.start_round > 0 and plan.parent_plan_id is None:
        raise InvalidInputError("parent_plan_id", "a silo plan starting after round 0 is a re-plan and names its parent")
    if plan.overhead != OVERHEAD[plan.method]:
        raise InvalidInputError(
            "overhead", f"states {plan.overhead} DP-SGD passes per round, but {plan.method} runs {OVERHEAD[plan.method]}"
        )
    selections = selection_rounds(scenario, plan.method, plan.start_round)
    finals: list[float] = []
    for spec, silo in zip(scenario.silos, plan.silos):
        field = f"silos.{silo.id}"
        expected = {
            "sampling_rate": scenario.batch_size / spec.num_samples,
            "steps_per_round": OVERHEAD[plan.method] * scenario.passes_steps(spec),
            "selection_rounds": selections,
        }
        for name, value in expected.items():
            if not math.isclose(float(getattr(silo, name)), float(value), rel_tol=1e-12):
                raise InvalidInputError(f"{field}.{name}", stated_differs(getattr(silo, name), value, "the mechanism runs"))
        want_selection = scenario.selection_epsilon_fraction * spec.epsilon if selections else None
        if (silo.selection_epsilon is None) != (want_selection is None) or (
            want_selection is not None and silo.selection_epsilon is not None
            and not math.isclose(silo.selection_epsilon, want_selection, rel_tol=1e-12)
        ):
            raise InvalidInputError(
                f"{field}.selection_epsilon", stated_differs(silo.selection_epsilon, want_selection, "the method selects at")
            )
        if not silo.noise_multiplier > 0:
            raise InvalidInputError(f"{field}.noise_multiplier", "must be positive: every silo's DP-SGD steps are noised")
        final = silo_epsilon_spent(plan, silo, plan.rounds, epsilon_fn=epsilon_fn)
        if not final <= spec.epsilon * (1 + VERIFY_SLACK):
            raise InvalidInputError(
                f"{field}.noise_multiplier",
                f"silo {silo.id} would spend epsilon {final:.6g} > its budget {spec.epsilon:.6g} ({NOTION})",
            )
        finals.append(final)
    if understated is None:
        return []
    found = _understated_figures(plan, finals)
    if found and understated == "refuse":
        raise InvalidInputError(found[0].field, found[0].reason())
    return found


def _understated_figures(plan: SiloSamplePlan, finals: list[float]) -> list[UnderstatedFigure]:
    """Each silo's stated figure below its recomputation from the silo's full-run history
    (``finals``: the figures of record :func:`verify` composed), one per field (:func:`verify`)."""
    record = ledger.ledger_accountant(plan.accountant)
    histories = [silo_history(plan, silo, plan.rounds) for silo in plan.silos]
    compared = any(silo.epsilon_rdp is not None or silo.epsilon_tight is not None for silo in plan.silos)
    figures = ledger.epsilon_figures(histories, plan.scenario.delta, {record: finals}) if compared else None
    found: list[UnderstatedFigure] = []
    for index, silo in enumerate(plan.silos):
        both = None if figures is None else figures[index]
        source = "its DP-SGD steps and cluster selections spend" if silo.selection_rounds else "its DP-SGD steps spend"
        for name, stated, value, accountant in (
            ("epsilon_planned", silo.epsilon_planned, finals[index], record),
            ("epsilon_rdp", silo.epsilon_rdp, None if both is None else both.rdp, RDP_ACCOUNTANT),
            ("epsilon_tight", silo.epsilon_tight, None if both is None else both.tight, TIGHT_ACCOUNTANT),
        ):
            if stated is not None and value is not None and stated < value * (1 - VERIFY_SLACK):
                found.append(UnderstatedFigure(silo.id, f"silos.{silo.id}.{name}", stated, value, MECHANISM,
                                               accountant, plan.rounds, source))
    return found


def describe(plan: SiloSamplePlan) -> str:
    """The text ``gdpfed plan`` prints: every silo's sigma_k and its verified epsilon."""
    lines = [
        f"{plan.method} plan for {len(plan.silos)} silos, {plan.rounds} rounds, batch {plan.batch_size}, "
        f"clip {plan.scenario.clip_norm:g}, delta {plan.scenario.delta:g}, accountant {plan.accountant}",
        f"privacy: {NOTION}",
        f"{'silo':<12} {'n_k':>8} {'eps_k':>7} {'q_k':>8} {'steps/rd':>8} {'sigma_k':>9} {'eps spent':>10} {'walk var':>10}",
    ]
    for silo in plan.silos:
        lines.append(
            f"{silo.id:<12} {silo.num_samples:>8} {silo.epsilon:>7.3g} {silo.sampling_rate:>8.4g} "
            f"{silo.steps_per_round:>8} {silo.noise_multiplier:>9.4g} {silo.epsilon_planned:>10.4g} "
            f"{silo.random_walk_variance_per_lr2:>10.3g}"
        )
    if any(s.selection_rounds for s in plan.silos):
        first = plan.silos[0]
        lines.append(f"cluster selection in the first {first.selection_rounds} rounds (exponential mechanism, zCDP, included above)")
    if plan.advice is not None:
        lines.append(f"advisory lambda* (mean-estimation proxy): {plan.advice.lambda_star_uniform:.4g}")
        per = ", ".join(f"{s.id}={s.lambda_star:.3g}" for s in plan.silos if s.lambda_star is not None)
        if per:
            lines.append(f"silo-specific lambda_k*: {per}")
    lines.extend(f"warning: {w}" for w in plan.warnings)
    return "\n".join(lines)


class SiloBudgetChange(_Strict):
    """A silo's new sample-level budget (docs/mrmtl.md §6)."""

    id: GroupId
    epsilon: Epsilon = Field(description="epsilon_k from now on; refused below what the silo has spent")


class SiloChanges(_Strict):
    """Budget changes of a silo plan's re-plan: the silos whose epsilon changes."""

    silos: list[SiloBudgetChange] = Field(default_factory=list, max_length=100_000)

    @field_validator("silos")
    @classmethod
    def _unique(cls, silos: list[SiloBudgetChange]) -> list[SiloBudgetChange]:
        if len({s.id for s in silos}) != len(silos):
            raise ValueError("each silo may be changed once")
        return silos


def ledger_rows(plan: SiloSamplePlan, rounds_counted: int, participations: Participations) -> dict[str, Any]:
    """The silo ledger's own fields after ``rounds_counted`` rounds (docs/ledger.md §7): each
    silo's budget, sample-level epsilon spent (its parents' rounds included) and remaining,
    with the same history's rdp and tight figures (docs/ledger.md §3, as the run summary's)."""
    del participations  # every silo takes part in every round
    spent_now = [silo_epsilon_spent(plan, silo, rounds_counted) for silo in plan.silos]
    figures = ledger.epsilon_figures(
        [silo_history(plan, silo, rounds_counted) for silo in plan.silos], plan.scenario.delta,
        {ledger.ledger_accountant(plan.accountant): spent_now},
    )
    silos = []
    for silo, spent_k, both in zip(plan.silos, spent_now, figures, strict=True):
        silos.append(SiloLedger(
            id=silo.id, epsilon=silo.epsilon, epsilon_spent=spent_k,
            epsilon_rdp=both.rdp, epsilon_tight=both.tight,
            epsilon_remaining=max(silo.epsilon - spent_k, 0.0),
            steps=silo.steps_per_round * rounds_counted, noise_multiplier=silo.noise_multiplier,
        ))
    return {"accountant": ledger.ledger_accountant(plan.accountant), "delta": plan.scenario.delta, "silos": silos}


def replan(
    plan: SiloSamplePlan, rounds_done: int, changes: SiloChanges | dict[str, Any],
    participations: Participations | None = None,
    parent_plan_id: str | None = None,
    mechanism: SecaggMechanism | None = None,
) -> SiloSamplePlan:
    """The re-plan of ``plan`` after ``rounds_done`` of its rounds (docs/mrmtl.md §6).

    Every silo's history is what it spent under ``plan`` (its parents' rounds included);
    ``changes`` raise or lower silos' budgets, refused (``BudgetConflictError`` naming
    ``changes.silos.<i>.epsilon``) below what the silo has spent; every silo is then
    re-calibrated for the remaining rounds with ``make_plan``."""
    del mechanism  # its rounds run no secure-aggregation noise (PrivacyUnit.secagg_mechanisms)
    del participations  # a silo's ledger counts rounds: every silo takes part in every one
    if not isinstance(changes, SiloChanges):
        changes = SiloChanges.model_validate(changes)
    start, _ = plan.remaining_rounds(rounds_done, plan.scenario.rounds)
    budgets = {spec.id: spec.epsilon for spec in plan.scenario.silos}
    for index, change in enumerate(changes.silos):
        if change.id not in budgets:
            raise InvalidInputError(f"changes.silos.{index}.id", f"the plan has no silo {change.id!r}")
        spent_now = silo_epsilon_spent(plan, plan.silo(change.id), rounds_done)
        if change.epsilon < spent_now * (1 + VERIFY_SLACK):
            raise BudgetConflictError(
                f"changes.silos.{index}.epsilon",
                f"silo {change.id} has already spent epsilon {spent_now:.6g} ({NOTION}); a budget of "
                f"{change.epsilon:g} is below it, and privacy spent cannot be taken back",
            )
        budgets[change.id] = change.epsilon
    scenario = plan.scenario.model_copy(update={
        "silos": [spec.model_copy(update={"epsilon": budgets[spec.id]}) for spec in plan.scenario.silos],
    })
    spent = {silo.id: silo_history(plan, silo, rounds_done) for silo in plan.silos}
    return make_plan(scenario, plan.method, start_round=start, spent=spent, parent_plan_id=parent_plan_id)


UNIT = PrivacyUnit(
    name=NAME,
    notion=NOTION,
    scenario_model=SiloScenario,
    plan_model=SiloSamplePlan,
    methods=SILO_METHODS,
    default_method="mrmtl",
    make_plan=make_plan,
    describe=describe,
    verify=verify,
    spent=spent,
    mechanism=MECHANISM,
    label="silo sample-level",
    figure="epsilon",
    entities="silos",
    budget_field="epsilon",
    changes_model=SiloChanges,
    wire_enums={"SiloMethod": SiloMethod},
    replan=replan,
    ledger_model=SiloLedgerOut,
    ledger_rows=ledger_rows,
)
