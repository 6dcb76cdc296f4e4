"""Re-planning while training runs (docs/planning.md §9).

Each group's history is its parent plan's spent phases plus the part of the parent's own
phase that actually ran (``rounds_done`` rounds). The new plan covers the remaining rounds
and is calibrated with ``spent=`` so that history + new phase <= each group's (new) epsilon.
A group whose budget is used up is sampled at rate 0 with a warning, never given a negative
remainder.

When the parent's run executes the discrete mechanism (its pools state ``discrete``
blocks), the spent history is also recorded as what that run spent: each group's
Poisson-subsampled Skellam events and the wrap-around probability charged to delta
(``GroupPlan.spent_discrete``, ``spent_wrap_probability``) and the successor's blocks are
calibrated on it (``planner.discrete.pool_mechanisms``). Budgets are checked against the record
of the mechanism the run executes (``mechanism``: the service passes the one its run reported),
and against the larger of the two records where that is unknown (docs/planning.md §9 point 5).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

from accounting import noise_multiplier_exists
from accounting.accountants import AccountantName
from accounting.choices import SecaggMechanism
from accounting.errors import BudgetConflictError, InvalidInputError
from accounting.events import Phase, PoissonSampledSkellam, PrivacyEvent
from planner import discrete as plan_discrete
from planner import ledger as plan_ledger
from planner.finalize import History
from planner.plan import compare_problem, plan_problem
from planner.problem import Problem, build_problem
from planner.schema import Changes, GroupSpec, Plan, Scenario

# Each group's spent Skellam events and the wrap-around probability they charged to delta.
SkellamHistories = dict[str, tuple[list[PoissonSampledSkellam], float]]

# A budget within this relative margin of what is spent counts as used up.
_EXHAUSTED_MARGIN = 1e-6


class SpentRecord(NamedTuple):
    """What a group spent before the re-plan, composed once (:func:`_spent_record`): the figure of
    record, the history and wrap-around charge a probe of the remaining rounds composes with, whether
    that is the Skellam record, and the Gaussian phases' epsilon at delta (what the successor's
    phases are calibrated after, and what guides the design's noise table; docs/planning.md §9
    point 4)."""

    epsilon: float
    history: list[PrivacyEvent]
    wrap: float
    discrete: bool
    gaussian: float


def replan(plan: Plan, rounds_done: int, changes: Changes, *, parent_plan_id: str | None = None,
           mechanism: SecaggMechanism | None = None) -> Plan:
    """A new plan for the rounds after ``rounds_done`` rounds of ``plan`` (docs/planning.md §9).

    The result records ``parent_plan_id`` and ``start_round = plan.start_round + rounds_done``;
    its ``rounds`` are the remaining ones (``changes.rounds`` may set a new total).
    ``mechanism`` is the secure-aggregation noise mechanism the run of ``plan`` executes (the
    one its round reports state, ``app.services.ledger.run_mechanism``): what each group spent is
    then that mechanism's record, as its ledger counts it; ``None`` (unknown: no round reported,
    or a plan file) takes the larger of the Gaussian and the Skellam record (§9 point 5). Skellam
    on a plan whose noised pools state no discrete block is refused
    (``planner.ledger.check_mechanism``).
    """
    if mechanism is not None:
        plan_ledger.check_mechanism(plan, mechanism)
    if not isinstance(changes, Changes):
        changes = Changes.model_validate(changes)
    total_rounds = changes.rounds if changes.rounds is not None else plan.scenario.rounds
    start, remaining = plan.remaining_rounds(
        rounds_done, total_rounds, field="changes.rounds", advice=" (raise rounds to continue)"
    )

    history, unprotected, statuses = _histories(plan, rounds_done)
    skellam = _discrete_histories(plan, rounds_done)
    # group id -> what it spent, composed once for the budget checks and the design's noise table
    records: dict[str, SpentRecord] = {}
    _refuse_budgets_below_spent(plan, changes, history, unprotected, skellam, mechanism, records)
    specs, statuses, notes = _apply_changes(plan, changes, statuses)
    for spec in specs:
        history.setdefault(spec.id, [])
        unprotected.setdefault(spec.id, 0)
        if skellam is not None:
            skellam.setdefault(spec.id, ([], 0.0))
    scenario_data = plan.scenario.model_dump()
    scenario_data.update(
        groups=[spec.model_dump() for spec in specs],
        rounds=total_rounds,
        expected_clients=changes.expected_clients
        if changes.expected_clients is not None
        else plan.scenario.participation,
        sampling_rate=None,
    )
    scenario = Scenario.model_validate(scenario_data)

    frozen = []
    for spec in specs:
        status = statuses[spec.id]
        if status == "active" and spec.epsilon is not None:
            status, note = _budget_status(
                spec, history[spec.id], unprotected[spec.id], remaining, scenario,
                None if skellam is None else skellam[spec.id], mechanism, records,
            )
            if note:
                notes.append(note)
        statuses[spec.id] = status
        frozen.append(status != "active")
    problem = build_problem(
        scenario,
        rounds=remaining,
        spent=[history[spec.id] for spec in specs],
        frozen=frozen,
        spent_epsilons=[records[spec.id].gaussian if spec.id in records else None for spec in specs],
    )
    problem = _with_notes(problem, notes)
    hist = History(
        statuses=tuple(statuses[spec.id] for spec in specs),
        unprotected_rounds=tuple(unprotected[spec.id] for spec in specs),
        start_round=start,
        parent_plan_id=parent_plan_id,
        spent_discrete=() if skellam is None else tuple(tuple(skellam[spec.id][0]) for spec in specs),
        spent_wrap=() if skellam is None else tuple(skellam[spec.id][1] for spec in specs),
    )
    if plan.comparison is not None:
        return compare_problem(problem, hist)
    return plan_problem(problem, plan.method, hist)


def _histories(plan: Plan, rounds_done: int) -> tuple[dict[str, list[Phase]], dict[str, int], dict[str, str]]:
    """Spent phases after ``rounds_done`` rounds of ``plan`` (``planner.ledger.group_history``,
    the ledger's own answer), rounds sampled without noise, and each group's status."""
    history: dict[str, list[Phase]] = {}
    unprotected: dict[str, int] = {}
    statuses: dict[str, str] = {}
    for group in plan.groups:
        history[group.id] = plan_ledger.group_history(plan, group, rounds_done)
        ran_without_noise = group.sampling_rate > 0 and (
            group.epsilon is None or plan_ledger.effective_noise_multiplier(plan, group) <= 0
        )
        extra = rounds_done if ran_without_noise else 0
        unprotected[group.id] = group.unprotected_rounds + extra
        statuses[group.id] = "removed" if group.status == "removed" else "active"
    return history, unprotected, statuses


def _discrete_histories(plan: Plan, rounds_done: int) -> SkellamHistories | None:
    """Each group's spent Skellam events and wrap-around charge after ``rounds_done`` rounds of
    ``plan`` when its run executes the discrete mechanism (its scenario's ``secagg_mechanism``,
    even where no pool states a block: every group exhausted; ``planner.discrete.spent_record``,
    what the run's ledger counts); ``None`` for a continuous parent, or one whose own spent history is not recorded as Skellam events (the successor
    then states no blocks: nothing is calibrated on a history that is not the one run)."""
    record = {g.id: plan_discrete.spent_record(plan, g, rounds_done) for g in plan.groups}
    if any(value is None for value in record.values()):
        return None
    return {gid: value for gid, value in record.items() if value is not None}


def _skellam_spent(events: list[PoissonSampledSkellam], wrap: float, delta: float, accountant: AccountantName) -> float:
    """Epsilon of a skellam run's spent events at delta less their wrap-around charge, as its ledger
    prices them: by the blocks' calibration accountant of the plan's ``accountant``
    (``planner.discrete.calibration_accountant``, as ``planner.ledger.history_accountant``)."""
    return plan_ledger.history_epsilon(events, delta - wrap, _skellam_accountant(accountant))


def _skellam_accountant(accountant: AccountantName) -> AccountantName:
    """The accountant a plan of ``accountant`` prices Skellam events by (docs/ledger.md §3)."""
    return plan_discrete.calibration_accountant(accountant)


def _spent_record(
    phases: list[Phase], skellam: tuple[list[PoissonSampledSkellam], float] | None, delta: float,
    accountant: AccountantName, mechanism: SecaggMechanism | None,
) -> SpentRecord:
    """What a group spent, by the record of the run's ``mechanism`` (docs/planning.md §9 point 5):
    its epsilon, the history and the wrap-around charge a probe of the remaining rounds composes
    with, whether that is the Skellam record, and the Gaussian phases' epsilon (:class:`SpentRecord`).

    ``accountant`` is the plan's; each record is priced as the run's ledger prices it
    (``planner.ledger.history_accountant``, docs/ledger.md §3): the Gaussian phases by
    ``ledger_accountant(accountant)``, the Skellam events by the blocks' calibration accountant
    (:func:`_skellam_spent`; prv and closed_form cannot account them).

    ``gaussian_continuous``: the Gaussian phases at delta (the continuous run's ledger, which
    charges no wrap-around); ``skellam``: the Skellam events at delta less their wrap-around
    charge (the skellam run's ledger); ``None`` (the mechanism is not known yet), or a parent that
    records no Skellam events: the larger of the two, so neither under-counts."""
    gaussian = plan_ledger.history_epsilon(phases, delta, accountant)
    if skellam is None or mechanism == "gaussian_continuous":
        return SpentRecord(gaussian, list(phases), 0.0, False, gaussian)
    events, wrap = skellam
    discrete = _skellam_spent(events, wrap, delta, accountant)
    if mechanism == "skellam" or discrete > gaussian:
        return SpentRecord(discrete, list(events), wrap, True, gaussian)
    return SpentRecord(gaussian, list(phases), wrap, False, gaussian)


def _refuse_budgets_below_spent(
    plan: Plan, changes: Changes, history: dict[str, list[Phase]], unprotected: dict[str, int],
    skellam: SkellamHistories | None = None, mechanism: SecaggMechanism | None = None,
    records: dict[str, SpentRecord] | None = None,
) -> None:
    """One rule for every budget change (docs/planning.md §9, docs/ledger.md §4).

    A new epsilon for an existing group must be at least what the ledger says the group
    already spent (the same history and accountant): a lower one would be a budget the
    ledger already breaks, so it is refused (``BudgetConflictError``, HTTP 409, CLI exit 2)
    rather than silently turned into "exhausted". An epsilon equal to the spent one within
    ``_EXHAUSTED_MARGIN`` is accepted and the group is exhausted. A group that was sampled
    without noise (opted out) has no finite epsilon, so no budget can be given back to it.
    What the group spent is the record of the run's ``mechanism`` (:func:`_spent_record`): a
    skellam run's Skellam events at delta less their wrap-around charge, a continuous run's
    Gaussian phases, and the larger of the two while the mechanism is unknown. ``records``, when
    given, receives each checked group's :class:`SpentRecord` (the re-plan's budget status and
    noise table read it rather than composing the history again).
    """
    groups = {g.id: g for g in plan.groups}
    for index, change in enumerate(changes.groups):
        if change.epsilon is None or change.id not in groups:
            continue
        field = f"changes.groups.{index}.epsilon"
        if unprotected[change.id] > 0:
            raise BudgetConflictError(
                field,
                f"group {change.id!r} was sampled without noise in {unprotected[change.id]} rounds (opted out); "
                "its epsilon is unbounded and no budget can be given back to it",
            )
        record = None if skellam is None else skellam[change.id]
        if not history[change.id] and (record is None or not record[0]):
            continue
        spent_record = _spent_record(history[change.id], record, plan.scenario.delta, plan.scenario.accountant, mechanism)
        if records is not None:
            records[change.id] = spent_record
        spent, discrete = spent_record.epsilon, spent_record.discrete
        which = _record_named(mechanism, record is not None, discrete)
        if change.epsilon < spent * (1 - _EXHAUSTED_MARGIN):
            raise BudgetConflictError(
                field,
                f"group {change.id!r} has already spent epsilon {spent:.6g}{which}; its budget cannot be "
                f"lowered to {change.epsilon:g} (the ledger would already exceed it)",
            )


def _record_named(mechanism: SecaggMechanism | None, skellam_recorded: bool, discrete: bool) -> str:
    """Which record a refusal's spent figure is (:func:`_spent_record`, docs/planning.md §9 point 5)."""
    if not skellam_recorded or mechanism == "gaussian_continuous":
        return ""
    if mechanism is None:
        # the operator can lift this (a budget between the two records may be one the run has
        # not spent), so the text says how to name the mechanism
        larger = "its Skellam events" if discrete else "its Gaussian phases"
        return (
            f" (the larger of its Gaussian phases and its Skellam events, here {larger}, because the run's "
            "mechanism is unknown: give it with --secagg-mechanism on the CLI; the service knows it once a "
            "round is reported)"
        )
    return " (its Skellam events: the run executes the discrete mechanism)"


def _apply_changes(
    plan: Plan, changes: Changes, statuses: dict[str, str]
) -> tuple[list[GroupSpec], dict[str, str], list[str]]:
    """The new group specs: edits to existing groups, new groups appended (docs/planning.md §9)."""
    specs = {spec.id: spec.model_dump() for spec in plan.scenario.groups}
    order = [spec.id for spec in plan.scenario.groups]
    notes: list[str] = []
    for index, change in enumerate(changes.groups):
        field = f"changes.groups.{index}"
        if change.opt_out and change.epsilon is not None:
            raise InvalidInputError(field, "give either epsilon or opt_out, not both")
        if change.id not in specs:
            if change.remove:
                raise InvalidInputError(f"{field}.id", f"no group {change.id!r} to remove")
            if change.num_clients is None or (change.epsilon is None and not change.opt_out):
                raise InvalidInputError(
                    field, f"new group {change.id!r} needs num_clients and epsilon (or opt_out: true)"
                )
            specs[change.id] = {
                "id": change.id,
                "epsilon": None if change.opt_out else change.epsilon,
                "num_clients": change.num_clients,
                "keep_ratio": change.keep_ratio,
            }
            order.append(change.id)
            statuses[change.id] = "active"
            notes.append(f"group {change.id!r} joins at this round with fresh clients and no history")
            continue
        spec = specs[change.id]
        if change.remove:
            statuses[change.id] = "removed"
            notes.append(f"group {change.id!r} is removed from the remaining rounds; its history is kept")
            continue
        if change.epsilon is not None:
            spec["epsilon"] = change.epsilon
        if change.opt_out:
            spec["epsilon"] = None
        if change.num_clients is not None:
            spec["num_clients"] = change.num_clients
        if change.keep_ratio is not None:
            spec["keep_ratio"] = change.keep_ratio
    return [GroupSpec.model_validate(specs[i]) for i in order], statuses, notes


def _budget_status(
    spec: GroupSpec, spent: list[Phase], unprotected: int, remaining: int, scenario: Scenario,
    skellam: tuple[list[PoissonSampledSkellam], float] | None = None,
    mechanism: SecaggMechanism | None = None,
    records: dict[str, SpentRecord] | None = None,
) -> tuple[str, str | None]:
    """active, or exhausted with the reason (used up, sampled without noise, or no room left).

    ``skellam``: the group's spent Skellam events and their wrap-around charge when the plan
    states discrete blocks; the spent figure is the record of the run's ``mechanism``
    (:func:`_spent_record`: the larger of the two while it is unknown), and the room left is
    probed after that record's history (docs/planning.md §9). ``records``: group id -> its
    :class:`SpentRecord` where the re-plan composed it already (read, not composed again); the
    group's record is added to it when composed here."""
    assert spec.epsilon is not None
    if unprotected > 0:
        return "exhausted", (
            f"group {spec.id!r} was sampled without noise in {unprotected} rounds while opted out; no finite "
            "epsilon can be claimed for it, so it is not sampled again"
        )
    if not spent and (skellam is None or not skellam[0]):
        return "active", None
    record = None if records is None else records.get(spec.id)
    if record is None:
        record = _spent_record(spent, skellam, scenario.delta, scenario.accountant, mechanism)
        if records is not None:
            records[spec.id] = record
    used, probe_history, wrap, discrete = record.epsilon, record.history, record.wrap, record.discrete
    if used >= spec.epsilon * (1 - _EXHAUSTED_MARGIN):
        return "exhausted", (
            f"group {spec.id!r} has already spent epsilon {used:.4g} of its budget {spec.epsilon:g}; it is "
            "sampled at rate 0 from now on"
        )
    if not _room_left(spec, probe_history, scenario.delta - wrap, remaining, scenario, discrete):
        return "exhausted", (
            f"group {spec.id!r} has spent epsilon {used:.4g} of {spec.epsilon:g}; what is left is too little "
            f"for {remaining} more rounds even at one expected client a round, so it is sampled at rate 0"
        )
    # the child's phases are calibrated on the Gaussian record whatever the run executes
    # (planner.finalize; its blocks on the Skellam one): a skellam run's Gaussian record can
    # stand above its Skellam events' figure and leave those phases no room
    if discrete and spent and not _room_left(spec, spent, scenario.delta, remaining, scenario):
        return "exhausted", (
            f"group {spec.id!r} has spent epsilon {used:.6g} of {spec.epsilon:.6g} (its Skellam events); the plan's "
            f"Gaussian record of the same rounds ({record.gaussian:.6g}) leaves its phases too little for {remaining} more "
            "rounds, so it is sampled at rate 0"
        )
    return "active", None


def _room_left(
    spec: GroupSpec, history: Sequence[PrivacyEvent], delta: float, remaining: int, scenario: Scenario,
    discrete: bool = False,
) -> bool:
    """Whether ``remaining`` more rounds at one expected client a round fit ``spec``'s epsilon after
    ``history`` at ``delta`` (a noise multiplier under the calibration cap exists). ``discrete``:
    ``history`` is Skellam events, probed by the accountant that prices them (:func:`_skellam_spent`),
    as the successor's blocks are calibrated on them."""
    assert spec.epsilon is not None
    probe = max(spec.min_sampling_rate, 1.0 / spec.num_clients)
    priced_by = _skellam_accountant(scenario.accountant) if discrete else scenario.accountant
    fast = plan_ledger.ledger_accountant(priced_by, per_round=True)
    # the fast accountant (rdp) over-states a history the tight one calibrated (pld): where it
    # finds no room, the plan's own accountant decides (issue 26)
    for accountant in dict.fromkeys((fast, plan_ledger.ledger_accountant(priced_by))):
        # pld answers from one composition at its search's cap, not a calibration (issue 26 §2)
        if noise_multiplier_exists(min(probe, 1.0), remaining, spec.epsilon, delta, accountant, spent=history):
            return True
    return False


def _with_notes(problem: Problem, notes: list[str]) -> Problem:
    return replace(problem, notes=tuple(problem.notes) + tuple(notes))
