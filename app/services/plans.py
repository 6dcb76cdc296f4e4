"""Plans: compute (planner), store, read, list, re-plan (docs/service.md §Plans).

Planning runs on the bounded compute pool (``app.compute``); storing is one write
transaction. A re-plan is stored as a child linked to its parent; a plan can be
re-planned once (a second child would be a second future for the same rounds and
could spend the groups' budgets twice). Every unit-specific step (which planner, which
methods, what a budget change is, how a re-plan is calibrated) is an attribute of the
plan's privacy unit (``planner.units``); this module names no unit.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar, cast

from pydantic import BaseModel
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from accounting.errors import InvalidInputError
from app.db import get_or_404, with_busy_retry, write_transaction
from app.deps import AppState, Principal
from app.errors import conflict
from app.models import PlanRecord
from app.schemas import AnyStoredPlan, PlanPage, PlanSummary, ReplanRequest, StoredPlan, stored_model
from app.services import ledger as ledger_service
from planner import make_plan
from planner.loading import load_changes
from planner.schema import Plan, PlanDocument, RequestedMethod, Scenario, SecaggMechanism
from planner.units import UNITS, PrivacyUnit, load_plan, load_plan_document, privacy_unit, scenario_unit_name, unit_of
from planner.units.base import Participations

MAX_PAGE = 200
AnyPlan = TypeVar("AnyPlan", bound=PlanDocument)


def new_id() -> str:
    return uuid.uuid4().hex


def check_size(state: AppState, scenario: BaseModel) -> None:
    """Refuse scenarios with more protected entities (groups, silos) than the service's
    ``max_groups`` (a denial-of-service bound), naming ``scenario.<entities>``."""
    unit = privacy_unit(scenario_unit_name(scenario))
    count = unit.entity_count(scenario)
    if count > state.settings.max_groups:
        raise InvalidInputError(
            f"scenario.{unit.entities}", f"at most {state.settings.max_groups} {unit.entities} per scenario on "
            f"this server (got {count}); raise GDPFED_MAX_GROUPS to allow more"
        )


def compute_plan(state: AppState, scenario: Scenario, method: RequestedMethod) -> Plan:
    check_size(state, scenario)
    return state.compute.run(make_plan, scenario, method, clients_needed=False)


def compute_unit_plan(state: AppState, unit: PrivacyUnit, scenario: BaseModel, method: str) -> PlanDocument:
    """``scenario`` planned by its unit's planner (``PrivacyUnit.service_plan``, else
    ``make_plan``) on the compute pool."""
    check_size(state, scenario)
    plan: PlanDocument = state.compute.run(unit.service_plan or unit.make_plan, scenario, method)
    return plan


def compute_replan(state: AppState, plan: AnyPlan, rounds_done: int, changes: BaseModel,
                   parent_plan_id: str, participations: Participations | None = None,
                   mechanism: SecaggMechanism | None = None) -> AnyPlan:
    """The plan's unit's re-plan (``PrivacyUnit.replan``) on the compute pool; ``mechanism`` is
    the noise mechanism its run reported (``ledger.run_mechanism``; ``None`` while unknown), so
    a budget is checked against what the ledger counts (docs/planning.md §9 point 5)."""
    replan = unit_of(plan).replan
    if replan is None:
        raise conflict(f"{plan.privacy_unit} plans are not re-planned")
    child = state.compute.run(replan, plan, rounds_done, changes, participations, parent_plan_id, mechanism)
    return cast(AnyPlan, child)  # a unit's re-plan is a plan of the same unit


def to_stored(record: PlanRecord) -> AnyStoredPlan:
    """The stored plan as its unit's stored model (``app.schemas.stored_model``)."""
    return stored_model(privacy_unit(record.privacy_unit)).model_validate(
        {
            **record.document,
            "id": record.id,
            "created_at": record.created_at,
            "created_by": record.created_by,
            "population_id": record.population_id,
            "parent_plan_id": record.parent_id,
        }
    )


def to_stored_client(record: PlanRecord) -> StoredPlan:
    """A stored client-level plan (re-plans and populations are client-level only)."""
    stored = to_stored(record)
    if not isinstance(stored, StoredPlan):
        raise InvalidInputError("privacy_unit", f"plan {record.id} is a {record.privacy_unit} plan, not a client-level one")
    return stored


def to_plan(record: PlanRecord) -> Plan:
    """The stored client-level plan (documents of schema version 1 are read as version 2)."""
    return load_plan(record.document)


def to_plan_document(record: PlanRecord) -> PlanDocument:
    """The stored plan of any unit (``planner.units.load_plan_document``)."""
    return load_plan_document(record.document)


def store_plan(session: Session, plan: PlanDocument, *, created_by: str | None,
               population_id: str | None = None, parent_id: str | None = None) -> PlanRecord:
    plan_id = new_id()
    document = plan.model_dump(mode="json")
    document["parent_plan_id"] = parent_id
    record = PlanRecord(
        id=plan_id,
        created_by=created_by,
        method=plan.method,
        privacy_unit=plan.privacy_unit,
        # a unit without an (epsilon, delta) accountant (metric leakage) stores none
        accountant=getattr(plan, "accountant", None),
        start_round=plan.start_round,
        rounds=plan.rounds,
        parent_id=parent_id,
        population_id=population_id,
        document=document,
    )
    session.add(record)
    session.flush()
    return record


def load_record(session: Session, plan_id: str, *, lock: bool = False) -> PlanRecord:
    return get_or_404(session, PlanRecord, plan_id, "plan", lock=lock)


def child_of(session: Session, plan_id: str) -> PlanRecord | None:
    return session.scalar(select(PlanRecord).where(PlanRecord.parent_id == plan_id))


@contextmanager
def in_scenario(model: type[BaseModel] = Scenario) -> Iterator[None]:
    """The planner names a refused field relative to the scenario (``adaptive_clip.count_noise_std``);
    in a request body, a stored plan and a population that field is ``scenario.<field>``, as
    pydantic's own checks say (docs/service.md §Errors). Fields the planner names relative to
    something else (``rounds_done``, ``changes.groups.0.epsilon``) pass unchanged."""
    try:
        yield
    except InvalidInputError as exc:
        if type(exc) is not InvalidInputError or exc.field.split(".")[0] not in model.model_fields:
            raise
        raise InvalidInputError(f"scenario.{exc.field}", exc.reason) from None


def create_plan(state: AppState, scenario: BaseModel, method: str | None, caller: Principal) -> AnyStoredPlan:
    """Plan ``scenario`` with its unit's planner and ``method`` (the unit's default when none)."""
    unit = privacy_unit(scenario_unit_name(scenario))
    if method is not None and method not in unit.methods:
        owners = [other.name for other in UNITS.values() if method in other.methods]
        raise InvalidInputError("method", f"{unit.name} scenarios take one of {', '.join(unit.methods)}, got {method!r}"
                                + (f" (it plans {owners[0]} scenarios: scenario.privacy_unit {owners[0]})" if owners else ""))
    with in_scenario(unit.scenario_model):
        plan = compute_unit_plan(state, unit, scenario, method or unit.default_method)

    def attempt() -> AnyStoredPlan:
        with write_transaction(state.sessions) as session:
            return to_stored(store_plan(session, plan, created_by=caller.name))

    stored = with_busy_retry(attempt)
    state.metrics.plans_created.labels("new").inc()
    return stored


def get_plan(session: Session, plan_id: str) -> AnyStoredPlan:
    record = load_record(session, plan_id)
    child = child_of(session, plan_id)
    stored = to_stored(record)
    stored.superseded_by = child.id if child is not None else None
    return stored


def encode_cursor(pk: int) -> str:
    return base64.urlsafe_b64encode(f"p{pk}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        if not raw.startswith("p"):
            raise ValueError(raw)
        return int(raw[1:])
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise InvalidInputError("cursor", "not a cursor this server handed out") from None


def list_plans(session: Session, limit: int, cursor: str | None, offset: int | None,
               population_id: str | None) -> PlanPage:
    """Plans newest first. Pages by ``cursor`` (stable under inserts) or by ``offset``."""
    if cursor is not None and offset is not None:
        raise InvalidInputError("cursor", "give cursor or offset, not both")
    base = select(PlanRecord)
    count = select(func.count()).select_from(PlanRecord)
    if population_id is not None:
        base = base.where(PlanRecord.population_id == population_id)
        count = count.where(PlanRecord.population_id == population_id)
    total = int(session.scalar(count) or 0)
    query = base.order_by(PlanRecord.pk.desc()).limit(limit + 1)
    if cursor is not None:
        query = query.where(PlanRecord.pk < decode_cursor(cursor))
    elif offset:
        query = query.offset(offset)
    records = list(session.scalars(query))
    more = len(records) > limit
    records = records[:limit]
    return PlanPage(
        items=[summary(record) for record in records],
        total=total,
        limit=limit,
        offset=offset if cursor is None else None,
        next_cursor=encode_cursor(records[-1].pk) if more and records else None,
    )


def summary(record: PlanRecord) -> PlanSummary:
    return PlanSummary(
        id=record.id,
        created_at=record.created_at,
        method=record.method,
        label=privacy_unit(record.privacy_unit).label,
        privacy_unit=record.privacy_unit,
        accountant=record.accountant,
        start_round=record.start_round,
        rounds=record.rounds,
        parent_plan_id=record.parent_id,
        population_id=record.population_id,
    )


def replan_plan(state: AppState, plan_id: str, body: ReplanRequest, caller: Principal,
                attempts: int = 3) -> AnyStoredPlan:
    """Re-plan a stored plan for its remaining rounds and store the child.

    ``rounds_done`` defaults to the ledger's count (every round up to the last reported
    one); a smaller value is refused, since it would forget privacy already spent. The
    plan's unit reads ``changes`` and computes the child (``PrivacyUnit.replan``; a unit
    whose ledger counts participations gets the run's, docs/ledger.md §8). The
    computation runs outside any transaction; the write transaction then re-checks that
    the ledger and the plan's children did not change meanwhile, and recomputes if they
    did (at most ``attempts`` times). The body is validated before the plan's state is
    checked (docs/service.md §Errors): a malformed ``changes`` is 422 naming its field even on
    a plan that cannot be re-planned now (409).
    """
    with state.sessions() as session:
        unit = privacy_unit(load_record(session, plan_id).privacy_unit)
    if unit.replan is None:  # no changes model to read the body with: the plan's kind, not its state
        raise conflict(f"plan {plan_id!r} is a {unit.name} plan, which is not re-planned")
    # the one reader of a re-plan's changes, gdpfed plan replan's too
    changes = load_changes(body.changes, unit.changes_model)
    for _ in range(attempts):
        with state.sessions() as session:
            record = load_record(session, plan_id)
            _check_replannable(session, record)
        # new rounds wait while the re-plan is computed (docs/ledger.md §4)
        with ledger_service.replan_fence(state, plan_id):
            with state.sessions() as session:
                record = load_record(session, plan_id)
                _check_replannable(session, record)
                counted = ledger_service.rounds_counted(session, record)
                rounds_done = _rounds_done(body.rounds_done, counted)
                plan = to_plan_document(record)
                tally = ledger_service.participations(session, record) if unit.participation_reports else None
                # the mechanism cannot change before the write below: a first report moves the count
                mechanism = ledger_service.run_mechanism(session, record)
            with in_scenario(unit.scenario_model):
                child = compute_replan(state, plan, rounds_done, changes, plan_id, tally, mechanism)

        def attempt() -> AnyStoredPlan | None:
            with write_transaction(state.sessions) as session:
                current = load_record(session, plan_id, lock=True)
                _check_replannable(session, current)
                if ledger_service.rounds_counted(session, current) != counted:
                    return None
                return to_stored(store_plan(
                    session, child, created_by=caller.name, parent_id=plan_id,
                    population_id=current.population_id,
                ))

        stored = with_busy_retry(attempt)
        if stored is not None:
            state.metrics.plans_created.labels("replan").inc()
            return stored
    raise conflict("rounds kept being reported while re-planning; retry")


def _check_replannable(session: Session, record: PlanRecord) -> None:
    if record.population_id is not None:
        raise conflict(
            f"plan {record.id!r} belongs to population {record.population_id!r}: change the "
            "population (PATCH /v1/populations/{id}/groups/{group_id}) to re-plan it"
        )
    existing = child_of(session, record.id)
    if existing is not None:
        raise conflict(f"plan {record.id!r} was already re-planned as {existing.id!r}; re-plan that one")


def _rounds_done(requested: int | None, counted: int) -> int:
    if requested is None:
        return counted
    if requested < counted:
        raise conflict(
            f"rounds_done={requested} is below the {counted} rounds the ledger counts for this "
            "plan; a re-plan may not forget privacy already spent",
            field="rounds_done",
        )
    return requested
