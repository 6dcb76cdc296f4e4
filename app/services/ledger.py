"""The privacy ledger: rounds claimed and reported by trainers, and the privacy they spent
(docs/service.md §Privacy ledger, docs/ledger.md §4).

What a round costs each group is ``planner.ledger``'s answer, the module the trainer's run
ledger uses too (docs/ledger.md §1-§3): this module only decides how many rounds of a plan
count. The rules, all conservative:

* Every round up to the last one claimed (``status: started``, sent by an attached trainer
  before it runs the round) or reported counts as spent (``rounds_counted``), even rounds
  whose report never arrived: a lost report must not hide privacy spent.
* A plan's history is its document's spent phases (its ancestors', composed when it was
  re-planned at the ledger's count) followed by this plan's counted rounds.
* A round at or after the start of the plan's re-plan belongs to the re-plan: 409
  ``superseded`` naming it, unless this plan already holds that round (a re-plan starts at
  ``rounds_counted``, so a claimed round always stays with the plan that claimed it).
* Plans of every privacy unit are counted so; what the counted rounds cost is the plan's
  unit's (``planner.units``: ``ledger_rows``, or ``planner.ledger``'s per-group epsilon for
  client-level plans, ``group_ledgers``). A unit whose ledger counts participations
  (``participation_reports``: metric plans) takes the clients that released with each
  round; a counted round without them counts as one release of every client
  (docs/ledger.md §8).
* A client-level run states its secure-aggregation noise mechanism with each report
  (``secagg_mechanism``; absent: ``gaussian_continuous``). The plan stores it from the
  first report on; a report naming another than the run's (this plan's, or the nearest
  re-planned ancestor's) is refused 409, and the ledger counts the rounds as that
  mechanism through ``planner.ledger`` (the discrete one: each pool's Skellam event, the
  wrap-around charged to delta), the trainer's tally's own functions (docs/ledger.md §3).

Each report is one write transaction keyed by ``(plan_id, round_index)`` (a unique
constraint): a repeated claim or report returns the existing record flagged ``duplicate``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from accounting.errors import InvalidInputError
from accounting.events import Phase, PoissonSampledGaussian, PoissonSampledSkellam
from app.db import with_busy_retry, write_transaction
from app.deps import AppState, Principal
from app.errors import ServiceError, conflict, not_found, superseded
from app.models import LedgerRound, PlanRecord
from app.schemas import GroupLedger, LedgerOut, RoundRecord, RoundReport
from planner import ledger as plan_ledger
from planner.schema import MECHANISM_LABELS, Plan, SecaggMechanism
from planner.units import load_plan, load_plan_document, privacy_unit
from planner.units.base import Participations, PrivacyUnit


def last_round_index(session: Session, plan_id: str) -> int | None:
    value = session.scalar(select(func.max(LedgerRound.round_index)).where(LedgerRound.plan_id == plan_id))
    return int(value) if value is not None else None


def rounds_counted(session: Session, record: PlanRecord) -> int:
    """Rounds of this plan counted as spent: up to and including the last claimed or reported one."""
    last = last_round_index(session, record.id)
    return 0 if last is None else last + 1 - record.start_round


@contextmanager
def replan_fence(state: AppState, plan_id: str) -> Iterator[None]:
    """Hold new rounds of ``plan_id`` (503 + Retry-After) while a re-plan of it is computed.

    A re-plan starts at the ledger's ``rounds_counted``; a trainer claiming a round every
    fraction of a second would otherwise move that count under every attempt and the
    operator's change would never land. Rounds already claimed still complete. The fence
    expires by itself after the compute time limit, so a crashed re-plan cannot wedge a plan.
    """
    seconds = float(state.settings.compute_timeout_seconds) + 5.0

    def set_fence(until: datetime | None) -> None:
        with write_transaction(state.sessions) as session:
            record = session.scalar(select(PlanRecord).where(PlanRecord.id == plan_id).with_for_update())
            if record is not None:
                record.replan_fence_until = until

    with_busy_retry(lambda: set_fence(datetime.now(UTC) + timedelta(seconds=seconds)))
    try:
        yield
    finally:
        with_busy_retry(lambda: set_fence(None))


def _fenced(record: PlanRecord) -> bool:
    until = record.replan_fence_until
    if until is None:
        return False
    if until.tzinfo is None:  # SQLite returns naive datetimes; they were written in UTC
        until = until.replace(tzinfo=UTC)
    return until > datetime.now(UTC)


def spent_by_group(plan: Plan, rounds: int, mechanism: SecaggMechanism = plan_ledger.CONTINUOUS) -> dict[str, float | None]:
    """Each group's epsilon after ``rounds`` counted rounds of ``plan`` run on ``mechanism`` (``planner.ledger``)."""
    return plan_ledger.spent_by_group(plan, rounds, mechanism=mechanism)


def run_mechanism(session: Session, record: PlanRecord) -> SecaggMechanism | None:
    """The noise mechanism of the run that reports ``record``'s rounds: the plan's stored one,
    else that of its nearest re-planned ancestor with one (a run that followed a re-plan keeps
    its mechanism); ``None`` while no round of the lineage was reported."""
    plan: PlanRecord | None = record
    while plan is not None:
        if plan.secagg_mechanism is not None:
            return plan.secagg_mechanism  # type: ignore[return-value]  # a String column holding a SecaggMechanism
        parent_id = plan.parent_id
        plan = None if parent_id is None else session.scalar(select(PlanRecord).where(PlanRecord.id == parent_id))
    return None


def _check_mechanism(session: Session, plan_record: PlanRecord, unit: PrivacyUnit, report: RoundReport) -> None:
    """The report's ``secagg_mechanism`` against the run's; stored on the plan with its first round.

    Units without secure-aggregation noise refuse the field (422); a mechanism other than the
    run's is a 409 (a run may not change mechanism mid-run: its rounds would be counted as
    one mechanism while another ran); skellam on a plan that states no discrete block for a
    noised pool is a 422 (``planner.ledger.check_mechanism``)."""
    if not unit.secagg_mechanisms:
        if report.secagg_mechanism is not None:
            raise InvalidInputError(
                "secagg_mechanism", f"{unit.name} plans run no secure-aggregation noise: leave secagg_mechanism out"
            )
        return
    given = report.secagg_mechanism or plan_ledger.CONTINUOUS
    run = run_mechanism(session, plan_record)
    if run is not None and run != given:
        raise conflict(
            f"the run reporting plan {plan_record.id}'s rounds executes {run}; a report of {given} is refused "
            "(a run may not change mechanism mid-run)", field="secagg_mechanism",
        )
    if plan_record.secagg_mechanism is None:
        plan_ledger.check_mechanism(load_plan(plan_record.document), given)
        plan_record.secagg_mechanism = given


def _check_run(plan_record: PlanRecord, report: RoundReport) -> None:
    """The report's ``run_id`` against the run the plan's rounds are bound to; the first report
    stating one binds them (docs/ledger.md §4). A second run of the same plan (a CI job started
    twice: both pass the preflight before either claims a round) would release every round again
    while the idempotent ledger counts it once, so its reports are refused (409 at ``run_id``)
    before anything of it is recorded; the first run's claims, retries and resumes state the same
    identity and go on. A report without one (a reporter from before the field) is taken while no run
    is bound, and refused (409 at ``run_id``) once one is: an older trainer, or a second job that
    states no identity, would otherwise release the bound run's rounds again unchecked."""
    if report.run_id is None:
        if plan_record.run_id is not None:
            raise conflict(
                f"plan {plan_record.id}'s rounds are trained and reported by run {plan_record.run_id}; a report "
                "without a run_id may be another run, which would release its rounds again while the ledger "
                "counts them once: report from that run (a gdpfed train that states its run_id) instead",
                field="run_id",
            )
        return
    if plan_record.run_id is None:
        plan_record.run_id = report.run_id
    elif plan_record.run_id != report.run_id:
        raise conflict(
            f"plan {plan_record.id}'s rounds are trained and reported by another run (run_id "
            f"{plan_record.run_id}); a second run of the same plan would release its rounds again while the "
            "ledger counts them once: continue that run (gdpfed train --out ITS_DIR --resume) instead",
            field="run_id",
        )


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
    # what the report states against its plan's kind and span is the body's error (422), checked
    # before the state the run binding is (409): validation before state (docs/service.md §Errors)
    unit = privacy_unit(plan_record.privacy_unit)
    if report.participants is not None and unit.check_participants is None:
        raise InvalidInputError(
            "participants", f"{unit.name} plans count rounds, not who took part: leave participants out"
        )
    first, end = plan_record.start_round, plan_record.start_round + plan_record.rounds
    if not first <= report.round_index < end:
        raise ServiceError(
            422, "invalid_input",
            f"round_index: must be in [{first}, {end}) for this plan (global round index; "
            f"the plan starts at round {first} and runs {plan_record.rounds} rounds)",
            field="round_index",
        )
    _check_run(plan_record, report)
    _check_mechanism(session, plan_record, unit, report)
    existing = _existing(session, plan_id, report.round_index)
    if existing is not None:
        if existing.status == "started" and report.status == "completed":
            _check_pools(plan_record, report)
            if report.participants is not None:
                if existing.participants is not None:
                    if _normalised(existing.participants) != _normalised(report.participants):
                        raise conflict(
                            f"round {report.round_index} was claimed with other participants; a round's "
                            "participants cannot change", field="participants",
                        )
                else:
                    _check_participants(session, plan_record, report)
                    existing.participants = _normalised(report.participants)
            existing.status = "completed"
            existing.aborted_pools = sorted(set(report.aborted_pools))
            existing.metrics = dict(report.metrics)
            existing.reported_by = caller.name
            session.flush()
            return _to_record(existing, duplicate=False)
        return _to_record(existing, duplicate=True)
    child = session.scalar(select(PlanRecord).where(PlanRecord.parent_id == plan_id))
    if child is not None and report.round_index >= child.start_round:
        raise superseded(plan_id, report.round_index, child.id, child.start_round)
    if _fenced(plan_record) and report.round_index >= plan_record.start_round + rounds_counted(session, plan_record):
        raise ServiceError(503, "replanning", "round_index: the plan is being re-planned (a budget change); "
                           "retry in a second", field="round_index", headers={"Retry-After": "1"})
    _check_pools(plan_record, report)
    if report.participants is not None:
        _check_participants(session, plan_record, report)
    row = LedgerRound(
        plan_id=plan_id,
        round_index=report.round_index,
        aborted_pools=sorted(set(report.aborted_pools)),
        metrics=dict(report.metrics),
        reported_by=caller.name,
        status=report.status,
        participants=None if report.participants is None else _normalised(report.participants),
    )
    session.add(row)
    session.flush()
    return _to_record(row, duplicate=False)


def _normalised(participants: dict[str, list[int]]) -> dict[str, list[int]]:
    return {group: sorted(set(clients)) for group, clients in sorted(participants.items()) if clients}


def plan_chain(session: Session, record: PlanRecord) -> list[PlanRecord]:
    """``record``'s ancestors (its re-plan lineage), oldest first, then ``record``."""
    chain = [record]
    while chain[0].parent_id is not None:
        parent = session.scalar(select(PlanRecord).where(PlanRecord.id == chain[0].parent_id))
        if parent is None:
            break
        chain.insert(0, parent)
    return chain


def participations(session: Session, record: PlanRecord, *, reporting: int | None = None) -> Participations:
    """Who released over the run up to ``record``'s counted rounds (docs/ledger.md §8).

    Counts come from every reported round of the plan and its ancestors (an ancestor counts
    the rounds up to its re-plan's start). A counted round without reported participants is
    one release of every client. ``reporting``: a round about to be recorded with its
    participants, counted as reported and left out of the counts (its check adds it)."""
    counts: dict[str, dict[int, int]] = {}
    unknown = 0
    chain = plan_chain(session, record)
    for plan, child in zip(chain, [*chain[1:], None]):
        counted = (child.start_round - plan.start_round) if child is not None else rounds_counted(session, plan)
        rows = list(session.scalars(select(LedgerRound).where(LedgerRound.plan_id == plan.id)))
        if child is None and reporting is not None:
            counted = max(counted, reporting + 1 - plan.start_round)
            rows = [row for row in rows if row.round_index != reporting]
            unknown -= 1  # the round being reported
        known = 0
        for row in rows:
            if row.round_index >= plan.start_round + counted or row.participants is None:
                continue
            known += 1
            for group, clients in row.participants.items():
                mine = counts.setdefault(group, {})
                for client in clients:
                    mine[int(client)] = mine.get(int(client), 0) + 1
        unknown += counted - known
    return Participations(counts=counts, unknown_rounds=max(unknown, 0))


def _check_participants(session: Session, plan_record: PlanRecord, report: RoundReport) -> None:
    """The plan's unit refuses participants it cannot take (``PrivacyUnit.check_participants``):
    an unknown group, a client twice, one past its participation cap (409 budget_conflict)."""
    check = privacy_unit(plan_record.privacy_unit).check_participants
    assert check is not None and report.participants is not None  # the caller's
    tally = participations(session, plan_record, reporting=report.round_index)
    # as reported (a client listed twice is refused, not merged)
    check(load_plan_document(plan_record.document), tally, dict(report.participants))


def _check_pools(plan_record: PlanRecord, report: RoundReport) -> None:
    pools = load_plan_document(plan_record.document).pool_ids()
    unknown = sorted(set(report.aborted_pools) - pools)
    if unknown:
        raise ServiceError(422, "invalid_input", f"aborted_pools: unknown pool ids {unknown}",
                           field="aborted_pools")


def _to_record(row: LedgerRound, duplicate: bool) -> RoundRecord:
    return RoundRecord(
        plan_id=row.plan_id,
        round_index=row.round_index,
        aborted_pools=list(row.aborted_pools),
        metrics=dict(row.metrics),
        reported_at=row.reported_at,
        reported_by=row.reported_by,
        status=row.status,  # a String column holding a RoundStatus
        participants=row.participants,
        duplicate=duplicate,
    )


def ledger(state: AppState, plan_id: str) -> BaseModel:
    """The plan's ledger: the rounds counted and, per protected entity, what they cost in the
    plan's unit's notion (``PrivacyUnit.ledger_rows``; client-level groups: ``group_ledgers``)."""
    with state.sessions() as session:
        record = session.scalar(select(PlanRecord).where(PlanRecord.id == plan_id))
        if record is None:
            raise not_found("plan", plan_id)
        unit = privacy_unit(record.privacy_unit)
        reported = int(session.scalar(
            select(func.count()).select_from(LedgerRound).where(LedgerRound.plan_id == plan_id)
        ) or 0)
        last = last_round_index(session, plan_id)
        child = session.scalar(select(PlanRecord.id).where(PlanRecord.parent_id == plan_id))
        counted = rounds_counted(session, record)
        tally = participations(session, record) if unit.participation_reports else Participations()
        mechanism = run_mechanism(session, record)
    if unit.ledger_rows is not None and unit.ledger_model is not None:
        fields = state.compute.run(unit.ledger_rows, load_plan_document(record.document), counted, tally)
        return unit.ledger_model(
            plan_id=record.id, privacy_unit=unit.name, notion=unit.notion, label=unit.label,
            start_round=record.start_round, rounds=record.rounds, rounds_reported=reported,
            last_round_index=last, rounds_counted=counted, superseded_by=child, **fields,
        )
    plan = Plan.model_validate(record.document)
    groups = state.compute.run(group_ledgers, plan, counted, mechanism or plan_ledger.CONTINUOUS)
    return LedgerOut(
        plan_id=record.id,
        privacy_unit=plan.privacy_unit,
        notion=unit.notion,
        label=unit.label,
        secagg_mechanism=mechanism,
        mechanism_label=MECHANISM_LABELS[mechanism] if mechanism is not None else None,
        # what priced the rows: a prv plan's Skellam rows are rdp's (planner.ledger.history_accountant)
        accountant=plan_ledger.rows_accountant(plan, mechanism or plan_ledger.CONTINUOUS),
        delta=plan.scenario.delta,
        start_round=record.start_round,
        rounds=record.rounds,
        rounds_reported=reported,
        last_round_index=last,
        rounds_counted=counted,
        superseded_by=child,
        groups=groups,
    )


def group_ledgers(plan: Plan, rounds: int,
                  mechanism: SecaggMechanism = plan_ledger.CONTINUOUS) -> list[GroupLedger]:
    """Each group's row of the ledger after ``rounds`` counted rounds of ``plan`` run on
    ``mechanism``: its figures, history and the delta it is accounted at (``planner.ledger``,
    the functions the trainer's tally uses) and, for a discrete group, its pool's threat model."""
    result = []
    spent_by_id = plan_ledger.spent_by_group(plan, rounds, mechanism=mechanism)
    # the figure of record is one of the row's two figures: each history composed once
    figures = plan_ledger.figures_by_group(plan, rounds, spent_by_id, mechanism=mechanism)
    for group in plan.groups:
        spent = spent_by_id[group.id]
        both = figures[group.id]
        history = plan_ledger.run_history(plan, group, rounds, mechanism)
        phases: list[Phase] = plan_ledger.merge_phases([e for e in history if isinstance(e, PoissonSampledGaussian)])
        discrete = plan_ledger.counts_discrete(plan, group, mechanism)
        block = plan.pool(group.pool).discrete
        budget = plan.scenario.group(group.id).epsilon  # the budget the plan's scenario fixes
        remaining = None
        if spent is not None and budget is not None:
            remaining = max(budget - spent, 0.0)
        result.append(GroupLedger(
            id=group.id,
            epsilon=budget,
            phases=phases,
            events=[e for e in history if isinstance(e, PoissonSampledSkellam)],
            secagg_mechanism="skellam" if discrete else plan_ledger.CONTINUOUS,
            threat_model=block.threat_model if discrete and block is not None else None,
            delta_accounted=plan_ledger.history_delta(plan, group, rounds, mechanism),
            steps=plan_ledger.rounds_sampled(plan, group, rounds),
            epsilon_spent=spent,
            epsilon_rdp=both.rdp if both is not None else None,
            epsilon_tight=both.tight if both is not None else None,
            epsilon_remaining=remaining,
            opted_out=plan_ledger.is_unprotected(plan, group, rounds),
        ))
    return result
