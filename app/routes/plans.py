"""``/v1/plans``: create (planner), read, list, re-plan (docs/service.md §Plans)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.deps import OperatorKey, PlannerKey, ReadSession, State
from app.errors import error_responses
from app.schemas import AnyStoredPlan, PlanCreate, PlanPage, ReplanRequest
from app.services import plans as plan_service

router = APIRouter(prefix="/v1/plans", tags=["plans"])


@router.post("", status_code=201, response_model=AnyStoredPlan, summary="compute and store a plan")
def create_plan(body: PlanCreate, state: State, caller: PlannerKey) -> AnyStoredPlan:
    return plan_service.create_plan(state, body.scenario, body.method, caller)


@router.get("", response_model=PlanPage, summary="list plans, newest first")
def list_plans(
    session: ReadSession,
    _caller: PlannerKey,
    limit: Annotated[int, Query(ge=1, le=plan_service.MAX_PAGE)] = 50,
    cursor: Annotated[str | None, Query(max_length=64, description="next_cursor of the previous page")] = None,
    offset: Annotated[int | None, Query(ge=0, le=10**9)] = None,
    population_id: Annotated[str | None, Query(max_length=32)] = None,
) -> PlanPage:
    return plan_service.list_plans(session, limit, cursor, offset, population_id)


@router.get("/{plan_id}", response_model=AnyStoredPlan, summary="one plan document", responses=error_responses(404))
def get_plan(plan_id: str, session: ReadSession, _caller: PlannerKey) -> AnyStoredPlan:
    return plan_service.get_plan(session, plan_id)


@router.post(
    "/{plan_id}/replan", status_code=201, response_model=AnyStoredPlan,
    summary="re-plan the remaining rounds with budget changes (child plan linked to its parent)",
    responses=error_responses(404, 409, s409="the plan was already re-planned, rounds kept arriving, or a "
                              "budget below what was spent (code budget_conflict)"),
)
def replan(plan_id: str, body: ReplanRequest, state: State, caller: OperatorKey) -> AnyStoredPlan:
    return plan_service.replan_plan(state, plan_id, body, caller)
