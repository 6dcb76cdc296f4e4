"""The privacy ledger: ``POST /v1/plans/{id}/rounds``, ``GET /v1/plans/{id}/ledger``."""

from __future__ import annotations

from fastapi import APIRouter, Response
from pydantic import BaseModel

from app.deps import OperatorKey, PlannerKey, State
from app.errors import error_responses
from app.schemas import RoundRecord, RoundReport
from app.services import ledger as ledger_service
from planner.units import LedgerDocument

router = APIRouter(prefix="/v1/plans", tags=["ledger"])


@router.post(
    "/{plan_id}/rounds", status_code=201, response_model=RoundRecord,
    summary="report one training round (idempotent on round_index)",
    responses={200: {"model": RoundRecord, "description": "already recorded (duplicate: true)"},
               **error_responses(404, 409, s409="superseded (report to the re-plan), budget_conflict (a "
                                 "participant past its group's participation cap), or conflict (a claimed "
                                 "round's participants changed; field run_id: a report of another run than the "
                                 "one the plan is bound to, or of none once it is bound)")},
)
def report_round(plan_id: str, body: RoundReport, state: State, caller: OperatorKey,
                 response: Response) -> RoundRecord:
    record = ledger_service.report_round(state, plan_id, body, caller)
    if record.duplicate:
        response.status_code = 200
    return record


@router.get(
    "/{plan_id}/ledger", response_model=LedgerDocument,
    summary="privacy spent per protected entity, in the plan's unit's notion (told apart by privacy_unit)",
    responses=error_responses(404),
)
def get_ledger(plan_id: str, state: State, _caller: PlannerKey) -> BaseModel:
    return ledger_service.ledger(state, plan_id)
