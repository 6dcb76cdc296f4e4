"""Populations: the budget registry operators manage (docs/service.md §Populations).

A population is a scenario kept up to date: its groups (epsilon, client count, options)
plus the scenario's system parameters, and at most one *active plan*. Changing a group
of a population that has an active plan re-plans it: the new plan starts where the
ledger says the active plan is (``ledger.rounds_counted``), composes each group's spent
phases with the new ones (``planner.replan``), becomes the active plan, and is linked
to its parent. A change that cannot be honoured (a budget below what the group already
spent, an infeasible re-plan) is refused with 409 and changes nothing.

Every change is one write transaction: group rows, the change history, the new plan and
the active-plan pointer commit together or not at all. The re-plan itself is computed
before that transaction; the transaction then checks (optimistic lock on the
population's ``version`` and the ledger's round count) that nothing changed meanwhile,
and the whole change is recomputed if something did.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from accounting.errors import BudgetConflictError, GdpfedError, InvalidInputError
from app.db import get_or_404, with_busy_retry, write_transaction
from app.deps import AppState, Principal
from app.errors import ServiceError, conflict, not_found
from app.models import PlanRecord, Population, PopulationChange, PopulationGroup, utc_now
from app.schemas import (
    ChangeOut,
    ChangePage,
    GroupPatch,
    PopulationChangeResult,
    PopulationCreate,
    PopulationOut,
    PopulationPage,
    StoredPlan,
)
from app.services import ledger as ledger_service
from app.services import plans as plan_service
from planner.schema import Changes, GroupChange, GroupSpec, Plan, Scenario, SecaggMechanism

_CORE_FIELDS = ("id", "epsilon", "num_clients")


@dataclass
class FieldChange:
    group_id: str | None
    field: str
    old: Any
    new: Any


@dataclass
class Snapshot:
    """A population as read before a change is computed."""

    population: Population
    groups: list[PopulationGroup]
    scenario: Scenario
    active: PlanRecord | None = None
    counted: int = 0
    # the noise mechanism the active plan's run reported (None: none reported yet)
    mechanism: SecaggMechanism | None = None


def spec_of(row: PopulationGroup) -> GroupSpec:
    return GroupSpec.model_validate({**row.options, "id": row.group_id, "epsilon": row.epsilon,
                                     "num_clients": row.num_clients})


def scenario_of(population: Population, groups: list[PopulationGroup]) -> Scenario:
    ordered = sorted(groups, key=lambda row: row.position)
    return Scenario.model_validate({**population.system, "groups": [spec_of(r).model_dump() for r in ordered]})


def _group_row(population_pk: int, position: int, spec: GroupSpec) -> PopulationGroup:
    return PopulationGroup(
        population_pk=population_pk,
        position=position,
        group_id=spec.id,
        epsilon=spec.epsilon,
        num_clients=spec.num_clients,
        options=spec.model_dump(mode="json", exclude=set(_CORE_FIELDS)),
    )


def _load(session: Session, population_id: str, *, lock: bool = False) -> Population:
    return get_or_404(session, Population, population_id, "population", lock=lock)


def _groups(session: Session, population: Population) -> list[PopulationGroup]:
    return list(session.scalars(
        select(PopulationGroup).where(PopulationGroup.population_pk == population.pk)
        .order_by(PopulationGroup.position)
    ))


def to_out(population: Population, scenario: Scenario) -> PopulationOut:
    return PopulationOut(
        id=population.id,
        name=population.name,
        method=population.method,
        scenario=scenario,
        active_plan_id=population.active_plan_id,
        version=population.version,
        created_at=population.created_at,
        updated_at=population.updated_at,
        created_by=population.created_by,
    )


def _change_out(row: PopulationChange) -> ChangeOut:
    return ChangeOut(at=row.at, actor=row.actor, group_id=row.group_id, field=row.field,
                     old=row.old_value, new=row.new_value, plan_id=row.plan_id)


# --- create and read --------------------------------------------------------------------


def create_population(state: AppState, body: PopulationCreate, caller: Principal) -> PopulationOut:
    plan_service.check_size(state, body.scenario)

    def attempt() -> PopulationOut:
        with write_transaction(state.sessions) as session:
            population = Population(
                id=plan_service.new_id(),
                name=body.name,
                method=body.method,
                system=body.scenario.model_dump(mode="json", exclude={"groups"}),
                created_by=caller.name,
            )
            session.add(population)
            session.flush()
            for position, spec in enumerate(body.scenario.groups):
                session.add(_group_row(population.pk, position, spec))
            session.flush()
            return to_out(population, scenario_of(population, _groups(session, population)))

    return with_busy_retry(attempt)


def get_population(session: Session, population_id: str) -> PopulationOut:
    population = _load(session, population_id)
    return to_out(population, scenario_of(population, _groups(session, population)))


def list_populations(session: Session, limit: int, offset: int) -> PopulationPage:
    total = int(session.scalar(select(func.count()).select_from(Population)) or 0)
    rows = list(session.scalars(select(Population).order_by(Population.pk.desc()).limit(limit).offset(offset)))
    items = [to_out(row, scenario_of(row, _groups(session, row))) for row in rows]
    return PopulationPage(items=items, total=total, limit=limit, offset=offset)


def list_changes(session: Session, population_id: str, limit: int, offset: int) -> ChangePage:
    population = _load(session, population_id)
    where = PopulationChange.population_pk == population.pk
    total = int(session.scalar(select(func.count()).select_from(PopulationChange).where(where)) or 0)
    rows = session.scalars(
        select(PopulationChange).where(where).order_by(PopulationChange.pk).limit(limit).offset(offset)
    )
    return ChangePage(items=[_change_out(r) for r in rows], total=total, limit=limit, offset=offset)


# --- the active plan --------------------------------------------------------------------


def create_active_plan(state: AppState, population_id: str, caller: Principal,
                       attempts: int = 3) -> StoredPlan:
    """Plan the population as it is now and make that its active plan."""
    for _ in range(attempts):
        with state.sessions() as session:
            population = _load(session, population_id)
            _refuse_if_active(population)
            version = population.version
            scenario = scenario_of(population, _groups(session, population))
        with plan_service.in_scenario():
            plan = plan_service.compute_plan(state, scenario, population.method)  # type: ignore[arg-type]

        def attempt() -> StoredPlan | None:
            with write_transaction(state.sessions) as session:
                current = _load(session, population_id, lock=True)
                _refuse_if_active(current)
                if current.version != version:
                    return None
                record = plan_service.store_plan(session, plan, created_by=caller.name,
                                                 population_id=population_id)
                current.active_plan_id = record.id
                current.updated_at = utc_now()
                session.add(PopulationChange(population_pk=current.pk, actor=caller.name, group_id=None,
                                             field="active_plan_id", old_value=None, new_value=record.id,
                                             plan_id=record.id))
                session.flush()
                return plan_service.to_stored_client(record)

        stored = _commit_optimistic(attempt)
        if stored is not None:
            state.metrics.plans_created.labels("population").inc()
            return stored
    raise conflict("the population kept changing while planning; retry")


def _refuse_if_active(population: Population) -> None:
    if population.active_plan_id is not None:
        raise conflict(
            f"population {population.id!r} already has the active plan {population.active_plan_id!r}; "
            "change its groups to re-plan it"
        )


def _commit_optimistic(attempt: Callable[[], StoredPlan | None]) -> StoredPlan | None:
    try:
        return with_busy_retry(attempt)
    except StaleDataError:
        return None


# --- changes ----------------------------------------------------------------------------


def patch_group(state: AppState, population_id: str, group_id: str, patch: GroupPatch,
                caller: Principal) -> PopulationChangeResult:
    def plan_change(snap: Snapshot) -> tuple[list[FieldChange], GroupChange, Scenario]:
        rows = {row.group_id: row for row in snap.groups}
        if group_id not in rows:
            raise not_found("group", group_id)
        row = rows[group_id]
        edits: list[FieldChange] = []
        if patch.opt_out and row.epsilon is not None:
            edits.append(FieldChange(group_id, "epsilon", row.epsilon, None))
        if patch.epsilon is not None and patch.epsilon != row.epsilon:
            edits.append(FieldChange(group_id, "epsilon", row.epsilon, patch.epsilon))
        if patch.num_clients is not None and patch.num_clients != row.num_clients:
            edits.append(FieldChange(group_id, "num_clients", row.num_clients, patch.num_clients))
        change = GroupChange(id=group_id, epsilon=patch.epsilon, opt_out=patch.opt_out,
                             num_clients=patch.num_clients)
        groups = [spec_of(r) for r in snap.groups]
        updated = []
        for spec in groups:
            if spec.id == group_id:
                values = spec.model_dump()
                if patch.opt_out:
                    values["epsilon"] = None
                elif patch.epsilon is not None:
                    values["epsilon"] = patch.epsilon
                if patch.num_clients is not None:
                    values["num_clients"] = patch.num_clients
                spec = GroupSpec.model_validate(values)
            updated.append(spec)
        return edits, change, _with_groups(snap.scenario, updated)

    return _apply(state, population_id, caller, plan_change)


def add_group(state: AppState, population_id: str, spec: GroupSpec, caller: Principal) -> PopulationChangeResult:
    def plan_change(snap: Snapshot) -> tuple[list[FieldChange], GroupChange, Scenario]:
        if any(row.group_id == spec.id for row in snap.groups):
            raise conflict(f"group {spec.id!r} already exists; PATCH it instead", field="id")
        if snap.active is not None:
            for name in ("min_sampling_rate", "clip_norm"):
                if name in spec.model_fields_set and getattr(spec, name) not in (None, 0.0):
                    raise InvalidInputError(
                        name, "cannot be set for a group added to a population with an active "
                        "plan (the re-plan uses the scenario's value)"
                    )
        edits = [FieldChange(spec.id, "group", None, spec.model_dump(mode="json"))]
        change = GroupChange(id=spec.id, epsilon=spec.epsilon, opt_out=spec.epsilon is None,
                             num_clients=spec.num_clients, keep_ratio=spec.keep_ratio)
        groups = [spec_of(r) for r in snap.groups] + [spec]
        return edits, change, _with_groups(snap.scenario, groups)

    return _apply(state, population_id, caller, plan_change, added=spec)


def _with_groups(scenario: Scenario, groups: list[GroupSpec]) -> Scenario:
    # Re-validating the whole scenario catches what a change breaks (e.g. expected_clients
    # above the new total number of clients is the planner's business; duplicate ids here).
    return Scenario.model_validate({**scenario.model_dump(exclude={"groups"}),
                                    "groups": [g.model_dump() for g in groups]})


def _active_plan_id(state: AppState, population_id: str) -> str | None:
    with state.sessions() as session:
        return _load(session, population_id).active_plan_id


def _snapshot(state: AppState, population_id: str) -> Snapshot:
    with state.sessions() as session:
        population = _load(session, population_id)
        groups = _groups(session, population)
        snap = Snapshot(population, groups, scenario_of(population, groups))
        if population.active_plan_id is not None:
            snap.active = plan_service.load_record(session, population.active_plan_id)
            snap.counted = ledger_service.rounds_counted(session, snap.active)
            snap.mechanism = ledger_service.run_mechanism(session, snap.active)
    return snap


def _apply(state: AppState, population_id: str, caller: Principal,
           plan_change: Callable[[Snapshot], tuple[list[FieldChange], GroupChange, Scenario]],
           added: GroupSpec | None = None, attempts: int = 3) -> PopulationChangeResult:
    """Apply ``plan_change`` (re-planning the active plan) in one write transaction, retried while
    the population or its ledger moves under it (docs/service.md §Populations). A change that
    leaves every value as it is (a PATCH to the budget a group already has) is answered with the
    population as it is: no write, no new ``version``, no re-plan, no history row."""
    if added is None:
        # Checked before the re-plan fence: a no-op holds no trainer's rounds and writes nothing.
        # Another writer's change committed meanwhile is simply ordered after this request.
        snap = _snapshot(state, population_id)
        edits, _, _ = plan_change(snap)
        if not edits:
            return PopulationChangeResult(population=to_out(snap.population, snap.scenario), changes=[], plan=None)
    for _ in range(attempts):
        # new rounds of the active plan wait while the re-plan is computed (docs/ledger.md §4)
        active_id = _active_plan_id(state, population_id)
        fence = ledger_service.replan_fence(state, active_id) if active_id is not None else nullcontext()
        with fence:
            snap = _snapshot(state, population_id)
            edits, change, scenario = plan_change(snap)
            plan_service.check_size(state, scenario)
            child: Plan | None = None
            if snap.active is not None and edits:
                try:
                    with plan_service.in_scenario():
                        child = plan_service.compute_replan(
                            state, plan_service.to_plan(snap.active), snap.counted,
                            Changes(groups=[change]), snap.active.id, mechanism=snap.mechanism,
                        )
                except BudgetConflictError as exc:
                    # the planner's one rule (docs/planning.md §9): a budget below what was spent
                    raise ServiceError(409, exc.code, f"epsilon: {exc.reason}", "epsilon") from None
                except InvalidInputError as exc:
                    # a setting of the population's scenario the change cannot meet, named as in it
                    raise conflict(f"the change cannot be honoured: {exc.message}", field=exc.field) from None
                except GdpfedError as exc:
                    raise conflict(f"the change cannot be honoured: {exc.message}") from None

            def attempt() -> PopulationChangeResult | None:
                with write_transaction(state.sessions) as session:
                    population = _load(session, population_id, lock=True)
                    if population.version != snap.population.version:
                        return None
                    if snap.active is not None:
                        active = plan_service.load_record(session, snap.active.id, lock=True)
                        if ledger_service.rounds_counted(session, active) != snap.counted:
                            return None
                    rows = {row.group_id: row for row in _groups(session, population)}
                    plan_id = None
                    stored = None
                    if child is not None:
                        record = plan_service.store_plan(session, child, created_by=caller.name,
                                                         population_id=population_id,
                                                         parent_id=snap.active.id if snap.active else None)
                        population.active_plan_id = plan_id = record.id
                        stored = plan_service.to_stored(record)
                    if added is not None:
                        session.add(_group_row(population.pk, len(rows), added))
                    for edit in edits:
                        if edit.group_id in rows and edit.field in ("epsilon", "num_clients"):
                            setattr(rows[edit.group_id], edit.field, edit.new)
                    history = [
                        PopulationChange(population_pk=population.pk, actor=caller.name, group_id=e.group_id,
                                         field=e.field, old_value=e.old, new_value=e.new, plan_id=plan_id)
                        for e in edits
                    ]
                    session.add_all(history)
                    population.updated_at = utc_now()
                    session.flush()
                    out = to_out(population, scenario_of(population, _groups(session, population)))
                    return PopulationChangeResult(population=out, changes=[_change_out(h) for h in history],
                                                  plan=stored)

            try:
                result = with_busy_retry(attempt)
            except StaleDataError:
                result = None
            if result is not None:
                if result.plan is not None:
                    state.metrics.plans_created.labels("replan").inc()
                return result
    raise conflict("the population or its ledger kept changing during the change; retry")
