"""The privacy ledger: what a plan's rounds spend, for every package that reports it.

This is the one place that turns "n rounds of plan P have run" into each group's history
of privacy events and the epsilon they add up to (docs/ledger.md §1-§3): the events go
to the plan's accountant from the registry (``accounting.accountants``), which composes
them. The trainer's run ledger
(``trainer.units.client.tally``) and the service's ledger (``app.services.ledger``) are thin
wrappers around it: they only decide *how many* rounds count, never *what* a round costs.
Two copies of this knowledge once drifted into a privacy bug (the service composed each
group with its pool's multiplier instead of the group's effective one).

The mechanism of one round for a client of group g in pool P (a client-level plan) is one
step of the Poisson(q_g)-subsampled Gaussian (the ``PoissonSampledGaussian`` event, a
*phase*) with multiplier ``sigma_g = noise_std_P / C_g``, the
group's *effective* noise multiplier (``sigma_P`` when every clip norm in the pool is the
scenario's; docs/ledger.md §1). A group's history after ``n`` rounds of a plan is the
phases its parents spent (``phases[:spent_phase_count]``) followed by
``Phase(q_g, sigma_g, n)``. Every round counts for every group, sampled or not, aborted or
not: counting can only overstate the loss, never understate it (docs/ledger.md §2).

A run on the discrete mechanism (``secagg_mechanism="skellam"``) spends instead, for each
group of a pool that states a ``discrete`` block, the block's Poisson-subsampled Skellam
event (``planner.discrete.group_event``) at the plan's delta less each round's wrap-around
bound (``planner.discrete.run_delta``). Every function below that prices rounds takes the
run's ``mechanism``, so the trainer's tally and the service's ledger count a discrete run
through the same code (docs/ledger.md §3, "Which mechanism").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import NamedTuple

from accounting.accountants import RDP_ACCOUNTANT, TIGHT_ACCOUNTANT, AccountantName, get_accountant
from accounting.choices import SecaggMechanism
from accounting.errors import InvalidInputError
from accounting.events import MetricLeakage, Phase, PoissonSampledGaussian, PrivacyEvent
from accounting.metric import metric_leakage
from planner import discrete as plan_discrete
from planner.calibration import history_key
from planner.schema import GroupPlan, Plan

# The mechanism a run executes unless it says otherwise (the trainer's default, and what a
# round report that names none means: docs/service.md §Privacy ledger).
CONTINUOUS: SecaggMechanism = "gaussian_continuous"

EpsilonFn = Callable[[Sequence[PrivacyEvent], float, AccountantName], float]


def default_epsilon_fn(events: Sequence[PrivacyEvent], delta: float, accountant: AccountantName) -> float:
    """``accounting.epsilon_of_events(events, delta, accountant).epsilon``: the registry's
    accountant composes the events (docs/accounting.md §12)."""
    from accounting import epsilon_of_events

    return float(epsilon_of_events(list(events), delta, accountant).epsilon)


def effective_noise_multiplier(plan: Plan, group: GroupPlan) -> float:
    """sigma_g = noise_std_P / C_g: the multiplier one client of ``group`` is protected by.

    Per-group clip norms (``idp_scale``) give each group of a pool its own multiplier;
    the pool's ``noise_multiplier`` is only right when the group's clip norm is the
    scenario's (docs/ledger.md §1).
    """
    if group.effective_noise_multiplier is not None:
        return float(group.effective_noise_multiplier)
    pool = plan.pool(group.pool)
    if pool.noise_std > 0 and group.clip_norm > 0:
        return float(pool.noise_std / group.clip_norm)
    return float(pool.noise_multiplier)


def spent_history(plan: Plan, group: GroupPlan) -> list[Phase]:
    """The phases ``group`` spent under ``plan``'s parents: ``phases[:spent_phase_count]``.

    What follows them in the document must be the plan's own phase,
    ``Phase(q_g, sigma_g, plan.rounds)``, exactly as the plan will run it; a document whose
    own phase is anything else (hand-edited, or inconsistent with its pools) is refused,
    because a ledger that counted a phase other than the one run would be wrong.
    """
    history = list(group.phases[: group.spent_phase_count])
    own = group.phases[group.spent_phase_count :]
    sigma = effective_noise_multiplier(plan, group)
    runs = group.sampling_rate > 0 and sigma > 0 and plan.rounds > 0
    if own:
        matches = (
            runs
            and len(own) == 1
            and math.isclose(own[0].sampling_rate, group.sampling_rate, rel_tol=1e-9)
            and math.isclose(own[0].noise_multiplier, sigma, rel_tol=1e-9)
            and own[0].steps == plan.rounds
        )
        if not matches:
            stated = "; ".join(_phase_words(p.sampling_rate, p.noise_multiplier, p.steps) for p in own)
            runs_words = (
                _phase_words(group.sampling_rate, sigma, plan.rounds) if runs
                else "none: the group is not sampled with noise in this plan"
            )
            raise InvalidInputError(
                f"groups.{group.id}.phases",
                f"this plan's own phase{'s' if len(own) > 1 else ''} ({stated}) "
                f"{'are' if len(own) > 1 else 'is'} not the one it runs ({runs_words})",
            )
    elif runs and group.epsilon is not None:
        raise InvalidInputError(
            f"groups.{group.id}.phases", "lists no phase for this plan although the group is sampled with noise"
        )
    return history


def _phase_words(sampling_rate: float, noise_multiplier: float, steps: int) -> str:
    # a phase in words, for one-line errors (twelve digits: the check tolerates 1e-9)
    return f"sampling_rate {sampling_rate:.12g}, noise_multiplier {noise_multiplier:.12g}, {steps} rounds"


def merge_phases(phases: Sequence[Phase]) -> list[Phase]:
    """Consecutive phases with the same (sampling_rate, noise_multiplier) as one phase.

    Composition is additive in steps for identical mechanisms, so merging changes no
    epsilon; it only makes histories of different lengths comparable.
    """
    merged: list[Phase] = []
    for phase in phases:
        if phase.steps <= 0:
            continue
        last = merged[-1] if merged else None
        if last is not None and (last.sampling_rate, last.noise_multiplier) == (
            phase.sampling_rate,
            phase.noise_multiplier,
        ):
            merged[-1] = Phase(
                sampling_rate=last.sampling_rate, noise_multiplier=last.noise_multiplier, steps=last.steps + phase.steps
            )
        else:
            merged.append(phase)
    return merged


def same_history(a: Sequence[PrivacyEvent], b: Sequence[PrivacyEvent], rel_tol: float = 1e-9) -> bool:
    """Whether two histories are the same events: the phases merged (``merge_phases``),
    the other events kind by kind in order, every count equal and every other number within
    ``rel_tol`` (a history read back from a plan document went through decimal text).
    How a run that follows a re-plan checks that the re-plan's record of what was spent
    before it is what the run spent (docs/ledger.md §6)."""

    def split(events: Sequence[PrivacyEvent]) -> list[PrivacyEvent]:
        phases = [e for e in events if isinstance(e, PoissonSampledGaussian)]
        return [*merge_phases(phases), *(e for e in events if not isinstance(e, PoissonSampledGaussian))]

    def same_value(x: object, y: object) -> bool:
        if isinstance(x, float) or isinstance(y, float):
            return isinstance(x, int | float) and isinstance(y, int | float) and math.isclose(x, y, rel_tol=rel_tol)
        return x == y

    left, right = split(a), split(b)
    return len(left) == len(right) and all(
        type(x) is type(y) and x.model_dump().keys() == y.model_dump().keys()
        and all(same_value(value, y.model_dump()[key]) for key, value in x.model_dump().items())
        for x, y in zip(left, right)
    )


def group_history(plan: Plan, group: GroupPlan, rounds_run: int) -> list[PoissonSampledGaussian]:
    """The group's full history after ``rounds_run`` rounds of ``plan`` (docs/ledger.md §2).

    Spent phases of the parents, then ``Phase(q_g, sigma_g, rounds_run)`` if the group is
    sampled with noise in this plan. Phases without noise (an opted-out group sampled
    while it had no DP) are kept out of the list; ``is_unprotected`` reports them.
    """
    if not 0 <= rounds_run <= plan.rounds:
        raise InvalidInputError("rounds_run", f"must be from 0 to the plan's {plan.rounds} rounds, got {rounds_run}")
    phases = [p for p in spent_history(plan, group) if p.noise_multiplier > 0]
    sigma = effective_noise_multiplier(plan, group)
    if rounds_run > 0 and group.sampling_rate > 0 and sigma > 0:
        phases.append(
            PoissonSampledGaussian(sampling_rate=group.sampling_rate, noise_multiplier=sigma, steps=rounds_run)
        )
    return phases


def counts_discrete(plan: Plan, group: GroupPlan, mechanism: SecaggMechanism) -> bool:
    """Whether a run of ``mechanism`` prices ``group`` by Skellam events: a run on skellam, and
    a pool that states a ``discrete`` block (pools without noise state none) or Skellam events
    the group spent under a parent plan (``planner.discrete.counts_discrete``)."""
    return mechanism == "skellam" and plan_discrete.counts_discrete(plan, group)


def run_history(plan: Plan, group: GroupPlan, rounds_run: int,
                mechanism: SecaggMechanism = CONTINUOUS) -> list[PrivacyEvent]:
    """The group's history after ``rounds_run`` rounds of ``plan`` run on ``mechanism``
    (docs/ledger.md §2-§3): ``group_history`` on the continuous path; on skellam the Skellam
    events its parents' runs spent (``spent_discrete``), then the pool's Poisson-subsampled
    Skellam event of the rounds run (``planner.discrete.group_history``, docs/planning.md §9).
    Spent phases that no Skellam events record are refused (:func:`unrecorded_spent_problem`):
    the planner never states a block then, so only an edited plan gets here, and its history
    is not the one a skellam lineage ran."""
    if not counts_discrete(plan, group, mechanism):
        return list(group_history(plan, group, rounds_run))
    if not 0 <= rounds_run <= plan.rounds:
        raise InvalidInputError("rounds_run", f"must be from 0 to the plan's {plan.rounds} rounds, got {rounds_run}")
    problem = unrecorded_spent_problem(group)
    if problem is not None:
        raise InvalidInputError(f"groups.{group.id}.spent_discrete", problem)
    return list(plan_discrete.group_history(plan, group, rounds_run))


def unrecorded_spent_problem(group: GroupPlan) -> str | None:
    """Why a skellam run cannot price ``group``'s spent history, or ``None``: its noised spent phases
    cover more or fewer rounds than the Skellam events recorded for them (``spent_discrete``;
    ``planner.discrete.spent_as_discrete``). A re-plan records both for every group of a skellam
    lineage, and a re-plan of a continuous run states no block (``planner.discrete.with_discrete``),
    so such a plan was edited: its rounds are not priced (docs/ledger.md §3)."""
    if plan_discrete.spent_as_discrete(group):
        return None
    phases = sum(p.steps for p in group.phases[: group.spent_phase_count] if p.noise_multiplier > 0)
    events = sum(e.steps for e in group.spent_discrete)
    return (
        f"records Skellam events of {events} spent rounds where the group's noised spent phases cover {phases}: "
        "a skellam run prices its parents' rounds by the Skellam events they spent, and a plan whose spent "
        "history no Skellam events record (a re-plan of a continuous run) states no discrete block"
    )


def history_accountant(plan: Plan, group: GroupPlan, mechanism: SecaggMechanism = CONTINUOUS) -> AccountantName:
    """The accountant whose ``ledger_accountant`` prices ``run_history`` (docs/ledger.md §3): the
    plan's; for Skellam events, the one the blocks are calibrated and certified by
    (``planner.discrete.calibration_accountant``: pld for a pld plan, rdp for every other,
    since prv cannot account the Skellam event), so a group's figure of record is the
    figure its block was certified at."""
    if counts_discrete(plan, group, mechanism):
        return plan_discrete.calibration_accountant(plan.accountant)
    return plan.accountant


def record_accountant(plan: Plan, group: GroupPlan, mechanism: SecaggMechanism = CONTINUOUS) -> AccountantName:
    """The accountant of ``group``'s figure of record on ``mechanism``: ``ledger_accountant`` of
    :func:`history_accountant` (a prv plan's Skellam events are rdp's, docs/ledger.md §3)."""
    return ledger_accountant(history_accountant(plan, group, mechanism))


def rows_accountant(plan: Plan, mechanism: SecaggMechanism = CONTINUOUS) -> AccountantName:
    """The accountant that prices the figures of record of a ledger of ``plan`` run on
    ``mechanism`` (docs/ledger.md §3): the Skellam-priced groups' where the mechanism prices
    any (on skellam no private group of such a ledger is priced by Gaussian phases:
    :func:`check_mechanism` refuses a noised pool without a block and spent phases no events
    record), else the plan's ``ledger_accountant``."""
    discrete = {record_accountant(plan, g, mechanism) for g in plan.groups if counts_discrete(plan, g, mechanism)}
    return discrete.pop() if len(discrete) == 1 else ledger_accountant(plan.accountant)


def stated_mechanism(plan: Plan) -> SecaggMechanism:
    """The mechanism whose figures a client plan states as its groups' ``epsilon_spent``
    (docs/ledger.md §3, "What a plan states"): skellam where its mechanism prices a group by
    Skellam events (:func:`counts_discrete`), else gaussian_continuous (a continuous plan, or a
    skellam one that states no block: its figures are the Gaussian phases')."""
    mechanism = plan.scenario.mechanism
    return "skellam" if any(counts_discrete(plan, g, mechanism) for g in plan.groups) else CONTINUOUS


def stated_accountants(plan: Plan) -> list[AccountantName]:
    """The accountants of a client plan's figures of record on its own mechanism, the ones
    ``planner.verify`` recomputes them with (``ledger_accountant`` of :func:`history_accountant`
    for each private group, in the plans' order, once each; the plan's own for a plan without one)."""
    mechanism = plan.scenario.mechanism
    names = [ledger_accountant(history_accountant(plan, g, mechanism)) for g in plan.groups if g.epsilon is not None]
    return list(dict.fromkeys(names)) or [ledger_accountant(plan.accountant)]


def history_delta(plan: Plan, group: GroupPlan, rounds_run: int, mechanism: SecaggMechanism = CONTINUOUS) -> float:
    """The delta ``run_history`` is accounted at: the plan's, less the wrap-around bound of
    every round run where the group's rounds are discrete (``planner.discrete.run_delta``;
    the wrap-around probability is charged to delta, docs/secure-aggregation.md §Discrete noise)."""
    if counts_discrete(plan, group, mechanism):
        return plan_discrete.run_delta(plan, group, rounds_run)
    return float(plan.scenario.delta)


def missing_block_reason(pool_id: str) -> str:
    """Why a run on skellam cannot use pool ``pool_id``, a noised pool that states no ``discrete``
    block: the one text of that refusal, the service's (:func:`check_mechanism`, HTTP 422), the
    trainer's (``trainer.units.client.discrete.discrete_pools``, exit 2) and a running skellam
    run's at a re-plan it cannot follow (``trainer.units.client.tally``), each naming its own
    field (docs/secure-aggregation.md §Discrete noise, "The trainer side")."""
    return (
        f"pool {pool_id} states no discrete block: the skellam mechanism runs the plan's calibrated discrete noise "
        "and its ledger counts that noise's Skellam events, which this noised pool lacks (its rounds would be "
        "counted as continuous Gaussian phases under the discrete mechanism's name); plan the scenario with "
        "secagg_mechanism: skellam (the planner's default), or run --secagg-mechanism gaussian_continuous "
        "(approximate)"
    )


def pools_without_block(plan: Plan) -> list[str]:
    """The noised pools of ``plan`` (a sampled private group, noise) that state no ``discrete``
    block: those a skellam run cannot use (:func:`missing_block_reason`)."""
    return [
        pool.id for pool in plan.pools
        if pool.discrete is None and pool.noise_multiplier > 0
        and any(g.sampling_rate > 0 and g.epsilon is not None for g in plan.groups if g.pool == pool.id)
    ]


def check_mechanism(plan: Plan, mechanism: SecaggMechanism) -> None:
    """Refuse (``InvalidInputError`` naming ``secagg_mechanism``, :func:`missing_block_reason`)
    counting ``plan``'s rounds as ``mechanism`` when the plan does not state what that mechanism
    runs: on skellam, a pool whose groups are sampled with noise but that states no ``discrete``
    block (its rounds would be counted as continuous Gaussian phases under the discrete
    mechanism's name), or a group whose spent history no Skellam events record
    (:func:`unrecorded_spent_problem`)."""
    if mechanism != "skellam":
        return
    for pool_id in pools_without_block(plan):
        raise InvalidInputError("secagg_mechanism", missing_block_reason(pool_id))
    for group in plan.groups:
        problem = unrecorded_spent_problem(group) if counts_discrete(plan, group, mechanism) else None
        if problem is not None:
            raise InvalidInputError("secagg_mechanism", f"skellam: groups.{group.id}.spent_discrete {problem}")


def is_unprotected(plan: Plan, group: GroupPlan, rounds_run: int) -> bool:
    """True when the group has no finite epsilon: it opted out, its pool has no noise, or
    it was ever sampled without noise (``unprotected_rounds``, or a noiseless spent phase)."""
    if group.epsilon is None or group.unprotected_rounds > 0:
        return True
    if any(p.noise_multiplier <= 0 for p in group.phases[: group.spent_phase_count]):
        return True
    sampled_now = rounds_run > 0 and group.sampling_rate > 0
    return sampled_now and effective_noise_multiplier(plan, group) <= 0


def rounds_sampled(plan: Plan, group: GroupPlan, rounds_run: int) -> int:
    """Rounds in which the group was sampled at a nonzero rate, with or without noise:
    its parents' (noisy phases and ``unprotected_rounds``) and this plan's ``rounds_run``."""
    spent = sum(p.steps for p in group.phases[: group.spent_phase_count] if p.sampling_rate > 0)
    return spent + group.unprotected_rounds + (rounds_run if group.sampling_rate > 0 else 0)


def ledger_accountant(plan_accountant: AccountantName, *, per_round: bool = False) -> AccountantName:
    """The accountant a ledger uses for a plan of accountant ``plan_accountant`` (docs/ledger.md §3).

    The figure of record (run summary, service ledger) is the accountant's ``verified_by``
    (closed_form -> rdp: the paper's formula describes one phase and can under-state
    epsilon outside its lemma's conditions, docs/accounting.md §6). ``per_round`` (progress
    logs, one value per round, screening) uses the fast sound stand-in of an accountant that
    runs in child processes (prv -> rdp: a PRV call takes about half a second; rdp is an
    upper bound too), so neither is optimistic; every other accountant (pld) logs its own figure.
    """
    accountant = get_accountant(plan_accountant)
    # the stand-in only where the figure of record is slow to compute (prv: fenced child
    # processes); pld answers in milliseconds, and its rdp stand-in would show a pld plan's
    # groups above their budgets round after round (rdp over-states what pld calibrated)
    return accountant.per_round if per_round and accountant.runs_in_child else accountant.verified_by


def epsilon_spent(
    plan: Plan,
    group: GroupPlan,
    rounds_run: int,
    *,
    per_round: bool = False,
    epsilon_fn: EpsilonFn | None = None,
    mechanism: SecaggMechanism = CONTINUOUS,
) -> float | None:
    """Epsilon of the group's history after ``rounds_run`` rounds run on ``mechanism``
    (``None``: no DP).

    0 when nothing was spent yet; otherwise the epsilon of the events of ``run_history``
    at ``history_delta`` (the plan's delta on the continuous path) under
    ``ledger_accountant`` of ``history_accountant`` (docs/ledger.md §3).
    """
    if is_unprotected(plan, group, rounds_run):
        return None
    return history_epsilon(
        run_history(plan, group, rounds_run, mechanism), history_delta(plan, group, rounds_run, mechanism),
        history_accountant(plan, group, mechanism), per_round=per_round, epsilon_fn=epsilon_fn,
    )


def history_epsilon(
    events: Sequence[PrivacyEvent],
    delta: float,
    plan_accountant: AccountantName,
    *,
    per_round: bool = False,
    epsilon_fn: EpsilonFn | None = None,
) -> float:
    """Epsilon of a history of (epsilon, delta) events at ``delta`` under
    ``ledger_accountant(plan_accountant)``; 0 for an empty history (docs/ledger.md §3).

    Every unit's ledger composes through here (a client group's phases, a silo's DP-SGD
    steps and cluster selections), so the choice of accountant for a figure of record
    lives in one place.
    """
    if not events:
        return 0.0
    compute = epsilon_fn or default_epsilon_fn
    return float(compute(list(events), delta, ledger_accountant(plan_accountant, per_round=per_round)))


class EpsilonFigures(NamedTuple):
    """The two figures every plan and ledger row states beside its figure of record
    (docs/ledger.md §3): the history's epsilon under rdp and under the tight accountant (pld)."""

    rdp: float
    tight: float


def epsilon_figures(
    histories: Sequence[Sequence[PrivacyEvent]],
    delta: float,
    known: Mapping[AccountantName, Sequence[float | None]] | None = None,
) -> list[EpsilonFigures]:
    """``EpsilonFigures`` of each history at ``delta`` (0 for an empty one; docs/ledger.md §3).

    ``known[a][i]`` is history i's epsilon already computed under accountant ``a`` (the figure
    of record, when the ledger accountant is rdp or pld): it is used instead of recomputing.
    rdp answers every history in one vectorised call; pld each distinct history once (the
    groups of a plan often share one), all composed together (§13.6), each as an upper
    bound or rdp's answer where pld falls back (docs/accounting.md §13.4).
    """
    from accounting import epsilons_of_histories

    known = known or {}
    values: dict[AccountantName, list[float]] = {}
    for name in (RDP_ACCOUNTANT, TIGHT_ACCOUNTANT):
        given = known.get(name)
        out = [0.0] * len(histories)
        todo = [i for i, h in enumerate(histories) if h and (given is None or given[i] is None)]
        for i, h in enumerate(histories):
            if h and given is not None and given[i] is not None:
                out[i] = float(given[i])  # type: ignore[arg-type]
        if todo and name == RDP_ACCOUNTANT:
            answers = epsilons_of_histories([list(histories[i]) for i in todo], delta, name)
            for i, report in zip(todo, answers, strict=True):
                out[i] = float(report.epsilon)
        elif todo:
            # each distinct history once, all of them composed together (docs/accounting.md §13.6)
            keys = [history_key(histories[i]) for i in todo]
            first = {key: i for i, key in reversed(list(zip(todo, keys)))}
            reports = epsilons_of_histories([list(histories[i]) for i in first.values()], delta, name)
            distinct = {key: float(report.epsilon) for key, report in zip(first, reports, strict=True)}
            for i, key in zip(todo, keys, strict=True):
                out[i] = distinct[key]
        values[name] = out
    return [EpsilonFigures(r, t) for r, t in zip(values[RDP_ACCOUNTANT], values[TIGHT_ACCOUNTANT], strict=True)]


def figures_by_group(
    plan: Plan, rounds_run: int, spent: Mapping[str, float | None] | None = None,
    *, mechanism: SecaggMechanism = CONTINUOUS, only: Collection[str] | None = None,
) -> dict[str, EpsilonFigures | None]:
    """``EpsilonFigures`` of every group's history after ``rounds_run`` rounds of ``plan`` run on
    ``mechanism``, in the plan's order; ``None`` where the group has no finite epsilon (as
    ``epsilon_spent``). Each history at its ``history_delta``.

    ``spent``: each group's figure of record already computed (``epsilon_spent`` with the
    default ``epsilon_fn`` and the same ``mechanism``): it is the figure under
    ``ledger_accountant`` and is used as such (a ledger row states the same number twice,
    docs/ledger.md §3) instead of composing the history again. ``only``: the ids of the groups
    wanted (the others answer ``None``, uncomputed).
    """
    private = [
        g for g in plan.groups if not is_unprotected(plan, g, rounds_run) and (only is None or g.id in only)
    ]
    deltas = {g.id: history_delta(plan, g, rounds_run, mechanism) for g in private}
    by_id: dict[str, EpsilonFigures] = {}
    # one call per delta: the continuous path's groups share the plan's; a discrete pool's
    # groups share their pool's (the wrap-around share differs by pool)
    for delta in dict.fromkeys(deltas.values()):
        members = [g for g in private if deltas[g.id] == delta]
        known: dict[AccountantName, list[float | None]] | None = None
        if spent is not None:
            # each figure of record under its own accountant (a prv plan's Skellam rounds are rdp's)
            known = {}
            for i, g in enumerate(members):
                record = record_accountant(plan, g, mechanism)
                known.setdefault(record, [None] * len(members))[i] = spent[g.id]
        histories = [run_history(plan, g, rounds_run, mechanism) for g in members]
        by_id.update(zip((g.id for g in members), epsilon_figures(histories, delta, known), strict=True))
    return {g.id: by_id.get(g.id) for g in plan.groups}


def spent_by_group(
    plan: Plan, rounds_run: int, *, per_round: bool = False, epsilon_fn: EpsilonFn | None = None,
    mechanism: SecaggMechanism = CONTINUOUS,
) -> dict[str, float | None]:
    """``epsilon_spent`` of every group of the plan after ``rounds_run`` rounds run on
    ``mechanism``, in the plan's order."""
    return {
        g.id: epsilon_spent(plan, g, rounds_run, per_round=per_round, epsilon_fn=epsilon_fn, mechanism=mechanism)
        for g in plan.groups
    }


class StatedFigures(NamedTuple):
    """What a plan states for a group whose rounds its mechanism prices by Skellam events
    (docs/ledger.md §3, "What a plan states"): the figure of record of the full run
    (``epsilon_spent`` after ``plan.rounds`` rounds on the plan's mechanism) and its rdp and
    tight figures."""

    spent: float
    figures: EpsilonFigures


def executed_figures(plan: Plan, known: Mapping[str, float] | None = None) -> dict[str, StatedFigures]:
    """The figures ``plan`` states for each protected group that a run of its own mechanism
    (``scenario.mechanism``) prices by Skellam events (``counts_discrete``): its full-run
    ledger, ``spent_by_group(plan, plan.rounds, mechanism=...)`` and ``figures_by_group``, so
    the plan never states less than its run's ledger counts (docs/ledger.md §3). Groups priced
    by Gaussian phases are not in the answer: their plan figures are the verification's.

    ``known[g]``: group g's figure of record already computed from the same events at the
    same delta under the same accountant (the certification of its pool's block), used
    instead of composing them again.
    """
    mechanism = plan.scenario.mechanism
    priced = [
        g for g in plan.groups
        if counts_discrete(plan, g, mechanism) and not is_unprotected(plan, g, plan.rounds)
    ]
    if not priced:
        return {}
    known = known or {}
    spent: dict[str, float | None] = {
        g.id: float(known[g.id]) if g.id in known else epsilon_spent(plan, g, plan.rounds, mechanism=mechanism)
        for g in priced
    }
    both = figures_by_group(plan, plan.rounds, spent, mechanism=mechanism, only=spent.keys())
    out: dict[str, StatedFigures] = {}
    for g in priced:
        value, figures = spent[g.id], both[g.id]
        assert value is not None and figures is not None  # a protected group has both
        out[g.id] = StatedFigures(value, figures)
    return out


# --- metric (d-)privacy: the metric_local unit (docs/metric-privacy.md §4) -------------
# A different notion from everything above: these figures are leakages, composed by
# addition (accounting.metric), never epsilons, and never added to or compared with them.


def metric_participations_bound(rounds_run: int, max_participations: int | None) -> int:
    """The most releases one client can have made after ``rounds_run`` rounds: one per
    round at most, and never beyond its cap (the engine excludes capped clients at selection)."""
    return rounds_run if max_participations is None else min(rounds_run, max_participations)


def metric_client_leakage(model_dim: int, noise_multiplier: float, participations: int) -> float | None:
    """A client's metric leakage after ``participations`` Laplace releases: ``participations * n / nu``
    (``accounting.metric.metric_leakage`` of ``MetricLeakage`` events); ``None`` when
    ``nu = 0`` (the release is the model itself: no guarantee), 0 before any release."""
    if noise_multiplier == 0:
        return None
    if participations == 0:
        return 0.0
    return metric_leakage([MetricLeakage.laplace(model_dim, noise_multiplier, participations)])
