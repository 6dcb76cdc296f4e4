"""``/v1/populations``: the budget registry (docs/service.md §Populations). Planners read, operators change."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.deps import OperatorKey, PlannerKey, ReadSession, State
from app.errors import error_responses
from app.schemas import (
    ChangePage,
    GroupAdd,
    GroupPatch,
    PopulationChangeResult,
    PopulationCreate,
    PopulationOut,
    PopulationPage,
    StoredPlan,
)
from app.services import populations as population_service

router = APIRouter(prefix="/v1/populations", tags=["populations"])

Limit = Annotated[int, Query(ge=1, le=200)]
Offset = Annotated[int, Query(ge=0, le=10**9)]


@router.post("", status_code=201, response_model=PopulationOut, summary="register a population")
def create_population(body: PopulationCreate, state: State, caller: OperatorKey) -> PopulationOut:
    return population_service.create_population(state, body, caller)


@router.get("", response_model=PopulationPage, summary="list populations, newest first")
def list_populations(session: ReadSession, _caller: PlannerKey, limit: Limit = 50,
                     offset: Offset = 0) -> PopulationPage:
    return population_service.list_populations(session, limit, offset)


@router.get("/{population_id}", response_model=PopulationOut, summary="one population",
            responses=error_responses(404))
def get_population(population_id: str, session: ReadSession, _caller: PlannerKey) -> PopulationOut:
    return population_service.get_population(session, population_id)


@router.patch(
    "/{population_id}/groups/{group_id}", response_model=PopulationChangeResult,
    summary="change a group's epsilon or size (re-plans the active plan)",
    responses=error_responses(404, 409, s409="the change cannot be honoured: e.g. a budget lowered below what "
                              "the group has spent (code budget_conflict, field epsilon)"),
)
def patch_group(population_id: str, group_id: str, body: GroupPatch, state: State,
                caller: OperatorKey) -> PopulationChangeResult:
    return population_service.patch_group(state, population_id, group_id, body, caller)


@router.post(
    "/{population_id}/groups", status_code=201, response_model=PopulationChangeResult,
    summary="add a group (re-plans the active plan)",
    responses=error_responses(404, 409),
)
def add_group(population_id: str, body: GroupAdd, state: State, caller: OperatorKey) -> PopulationChangeResult:
    return population_service.add_group(state, population_id, body, caller)


@router.get("/{population_id}/changes", response_model=ChangePage, summary="change history",
            responses=error_responses(404))
def list_changes(population_id: str, session: ReadSession, _caller: PlannerKey, limit: Limit = 50,
                 offset: Offset = 0) -> ChangePage:
    return population_service.list_changes(session, population_id, limit, offset)


@router.post(
    "/{population_id}/plans", status_code=201, response_model=StoredPlan,
    summary="plan the population and make it the active plan",
    responses=error_responses(404, 409),
)
def create_active_plan(population_id: str, state: State, caller: OperatorKey) -> StoredPlan:
    return population_service.create_active_plan(state, population_id, caller)
