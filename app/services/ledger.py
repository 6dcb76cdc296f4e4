"""The privacy ledger: rounds reported by trainers, and the privacy they spent
(docs/service.md §Privacy ledger).

Accounting rules, all conservative:

* A reported round adds one step, for every group with ``sampling_rate > 0``, of the
  phase ``(q_g, sigma of g's pool)``. Rounds in which a pool's secure aggregation
  aborted still count: the clients were sampled and may have sent masked updates, and
  nothing is gained by assuming otherwise.
* Every round up to the last reported one counts as spent (``rounds_counted``), even
  rounds whose report never arrived: a lost report must not hide privacy spent.
* A plan's history starts with its ancestors': each parent counts the rounds from its
  own start to its child's ``start_round``.

Each report is one write transaction keyed by ``(plan_id, round_index)`` (a unique
constraint): reporting a round twice returns the first record flagged ``duplicate``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from accounting.epsilon import epsilon_of_phases
from accounting.mechanism import Phase
from planner.schema import Plan

from app.db import with_busy_retry, write_transaction
from app.deps import AppState, Principal
from app.errors import ServiceError, conflict, not_found
from app.models import LedgerRound, PlanRecord
from app.schemas import GroupLedger, LedgerOut, RoundRecord, RoundReport

# A phase of a group in one plan: (sampling_rate, noise_multiplier, steps); a
# noise_multiplier of 0 is an opted-out group (no DP).
RawPhase = tuple[float, float, int]

_MAX_CHAIN = 10_000


def merge_phases(phases: Iterable[RawPhase]) -> list[RawPhase]:
    """Merge consecutive phases with identical (sampling_rate, noise_multiplier)."""
    merged: list[RawPhase] = []
    for rate, sigma, steps in phases:
        if steps <= 0 or rate <= 0:
            continue
        if merged and merged[-1][0] == rate and merged[-1][1] == sigma:
            merged[-1] = (rate, sigma, merged[-1][2] + steps)
        else:
            merged.append((rate, sigma, steps))
    return merged


def group_phase(plan: Plan, group_id: str, steps: int) -> RawPhase | None:
    """The phase group ``group_id`` runs in ``plan`` for ``steps`` rounds (None if absent)."""
    try:
        group = plan.group(group_id)
    except KeyError:
        return None
    sigma = plan.pool(group.pool).noise_multiplier
    return (float(group.sampling_rate), float(sigma), steps)


def last_round_index(session: Session, plan_id: str) -> int | None:
    value = session.scalar(select(func.max(LedgerRound.round_index)).where(LedgerRound.plan_id == plan_id))
    return int(value) if value is not None else None


def rounds_counted(session: Session, record: PlanRecord) -> int:
    """Rounds of this plan counted as spent: up to and including the last reported one."""
    last = last_round_index(session, record.id)
    return 0 if last is None else last + 1 - record.start_round


def ancestry(session: Session, record: PlanRecord) -> list[PlanRecord]:
    """The plan and its ancestors, oldest first."""
    chain = [record]
    while chain[-1].parent_id is not None and len(chain) < _MAX_CHAIN:
        parent = session.scalar(select(PlanRecord).where(PlanRecord.id == chain[-1].parent_id))
        if parent is None:
            break
        chain.append(parent)
    return chain[::-1]


def histories(session: Session, record: PlanRecord) -> dict[str, list[RawPhase]]:
    """Each group's merged phases: ancestors up to their child's start, then this plan's
    counted rounds. Groups are those of ``record``'s plan, in its order."""
    chain = ancestry(session, record)
    plans = [Plan.model_validate(r.document) for r in chain]
    steps = [chain[i + 1].start_round - chain[i].start_round for i in range(len(chain) - 1)]
    steps.append(rounds_counted(session, record))
    result: dict[str, list[RawPhase]] = {}
    for group in plans[-1].groups:
        raw = [group_phase(plan, group.id, n) for plan, n in zip(plans, steps)]
        result[group.id] = merge_phases(p for p in raw if p is not None)
    return result


def ledger_accountant(plan_accountant: str) -> str:
    """The accountant the ledger uses: the plan's, except ``rdp`` for closed-form plans.

    The closed form reproduces the paper and can under-state epsilon outside its lemma's
    conditions (docs/accounting.md); privacy spent is never reported optimistically.
    """
    return "rdp" if plan_accountant == "closed_form" else plan_accountant


def spent_epsilon(phases: Sequence[RawPhase], delta: float, accountant: str) -> float | None:
    """epsilon of the composed phases (``accounting.epsilon_of_phases``), 0 with none,
    None when a phase had no noise (an opted-out group has no finite epsilon)."""
    if not phases:
        return 0.0
    if any(sigma <= 0 for _, sigma, _ in phases):
        return None
    report = epsilon_of_phases(
        [Phase(sampling_rate=q, noise_multiplier=s, steps=n) for q, s, n in phases],
        delta,
        ledger_accountant(accountant),  # type: ignore[arg-type]
    )
    return float(report.epsilon)


def report_round(state: AppState, plan_id: str, report: RoundReport, caller: Principal) -> RoundRecord:
    """Record one round (idempotent on ``round_index``)."""

    def attempt() -> RoundRecord:
        try:
            with write_transaction(state.sessions) as session:
                return _record_round(session, plan_id, report, caller)
        except IntegrityError:
            # Only reachable where writers are not serialised (PostgreSQL without the row
            # lock taking effect): the other writer's record wins, reported as duplicate.
            with state.sessions() as session:
                existing = _existing(session, plan_id, report.round_index)
                if existing is None:
                    raise
                return _to_record(existing, duplicate=True)

    record = with_busy_retry(attempt)
    state.metrics.ledger_updates.labels("duplicate" if record.duplicate else "recorded").inc()
    return record


def _existing(session: Session, plan_id: str, round_index: int) -> LedgerRound | None:
    return session.scalar(
        select(LedgerRound).where(LedgerRound.plan_id == plan_id, LedgerRound.round_index == round_index)
    )


def _record_round(session: Session, plan_id: str, report: RoundReport, caller: Principal) -> RoundRecord:
    plan_record = session.scalar(select(PlanRecord).where(PlanRecord.id == plan_id).with_for_update())
    if plan_record is None:
        raise not_found("plan", plan_id)
    existing = _existing(session, plan_id, report.round_index)
    if existing is not None:
        return _to_record(existing, duplicate=True)
    first, end = plan_record.start_round, plan_record.start_round + plan_record.rounds
    if not first <= report.round_index < end:
        raise ServiceError(
            422, "invalid_input",
            f"round_index: must be in [{first}, {end}) for this plan (global round index; "
            f"the plan starts at round {first} and runs {plan_record.rounds} rounds)",
            field="round_index",
        )
    child = session.scalar(select(PlanRecord).where(PlanRecord.parent_id == plan_id))
    if child is not None and report.round_index >= child.start_round:
        raise conflict(
            f"round {report.round_index} belongs to the re-plan {child.id!r} (which starts at round "
            f"{child.start_round}); report it there",
            field="round_index",
        )
    pools = {pool.id for pool in Plan.model_validate(plan_record.document).pools}
    unknown = sorted(set(report.aborted_pools) - pools)
    if unknown:
        raise ServiceError(422, "invalid_input", f"aborted_pools: unknown pool ids {unknown}",
                           field="aborted_pools")
    row = LedgerRound(
        plan_id=plan_id,
        round_index=report.round_index,
        aborted_pools=sorted(set(report.aborted_pools)),
        metrics=dict(report.metrics),
        reported_by=caller.name,
    )
    session.add(row)
    session.flush()
    return _to_record(row, duplicate=False)


def _to_record(row: LedgerRound, duplicate: bool) -> RoundRecord:
    return RoundRecord(
        plan_id=row.plan_id,
        round_index=row.round_index,
        aborted_pools=list(row.aborted_pools),
        metrics=dict(row.metrics),
        reported_at=row.reported_at,
        reported_by=row.reported_by,
        duplicate=duplicate,
    )


def ledger_snapshot(session: Session, plan_id: str) -> tuple[PlanRecord, dict[str, list[RawPhase]], int, int | None, str | None]:
    record = session.scalar(select(PlanRecord).where(PlanRecord.id == plan_id))
    if record is None:
        raise not_found("plan", plan_id)
    reported = int(session.scalar(
        select(func.count()).select_from(LedgerRound).where(LedgerRound.plan_id == plan_id)
    ) or 0)
    child = session.scalar(select(PlanRecord.id).where(PlanRecord.parent_id == plan_id))
    return record, histories(session, record), reported, last_round_index(session, plan_id), child


def ledger(state: AppState, plan_id: str) -> LedgerOut:
    """Per group: phases run, epsilon spent (the plan's accountant) and remaining."""
    with state.sessions() as session:
        record, phases_by_group, reported, last, child = ledger_snapshot(session, plan_id)
        counted = rounds_counted(session, record)
    plan = Plan.model_validate(record.document)
    delta = plan.scenario.delta
    groups = state.compute.run(_group_ledgers, plan, phases_by_group, delta)
    return LedgerOut(
        plan_id=record.id,
        accountant=ledger_accountant(plan.accountant),
        delta=delta,
        start_round=record.start_round,
        rounds=record.rounds,
        rounds_reported=reported,
        last_round_index=last,
        rounds_counted=counted,
        superseded_by=child,
        groups=groups,
    )


def spent_by_group(plan: Plan, phases_by_group: dict[str, list[RawPhase]]) -> dict[str, float | None]:
    return {
        gid: spent_epsilon(phases, plan.scenario.delta, plan.accountant)
        for gid, phases in phases_by_group.items()
    }


def _group_ledgers(plan: Plan, phases_by_group: dict[str, list[RawPhase]], delta: float) -> list[GroupLedger]:
    result = []
    for group in plan.groups:
        phases = phases_by_group.get(group.id, [])
        spent = spent_epsilon(phases, delta, plan.accountant)
        opted_out = any(sigma <= 0 for _, sigma, _ in phases) or group.epsilon is None
        remaining = None
        if spent is not None and group.epsilon is not None:
            remaining = max(group.epsilon - spent, 0.0)
        result.append(GroupLedger(
            id=group.id,
            epsilon=group.epsilon,
            phases=[Phase(sampling_rate=q, noise_multiplier=s, steps=n) for q, s, n in phases if s > 0],
            steps=sum(n for _, _, n in phases),
            epsilon_spent=spent,
            epsilon_remaining=remaining,
            opted_out=opted_out,
        ))
    return result
