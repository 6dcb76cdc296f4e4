"""The operator console: ``/console`` (a static page and its assets) and the read-only
``/v1/console/*`` views it draws (docs/service.md §Console).

The page is open (it holds no data); everything it shows is fetched with the key the user
enters, under the same roles as the rest of the API: a planner key sees, an operator key
may also change budgets and re-plan.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

from app.deps import PlannerKey, State
from app.errors import error_responses
from app.schemas import ConsoleComparison, ConsolePlan, ConsolePopulation
from app.services import console as console_service

STATIC_DIR = Path(__file__).resolve().parents[1] / "static"

router = APIRouter(tags=["console"])


@router.get("/console", include_in_schema=False)
async def console_page() -> FileResponse:
    return FileResponse(STATIC_DIR / "console.html", media_type="text/html")


@router.get("/v1/console/populations/{population_id}", response_model=ConsolePopulation,
            summary="a population as the console shows it: budgets, spending over rounds, plan lineage",
            responses=error_responses(404))
def population_view(population_id: str, state: State, _caller: PlannerKey) -> ConsolePopulation:
    return console_service.population_view(state, population_id)


@router.get("/v1/console/plans/{plan_id}", response_model=ConsolePlan,
            summary="a plan of any privacy unit as the console shows it: its ledger under its unit's label, its lineage",
            responses=error_responses(404))
def plan_view(plan_id: str, state: State, _caller: PlannerKey) -> ConsolePlan:
    return console_service.plan_view(state, plan_id)


@router.post("/v1/console/populations/{population_id}/comparison", response_model=ConsoleComparison,
             summary="every method on the population as it is now (not stored), with the recommendation",
             responses=error_responses(404))
def comparison(population_id: str, state: State, _caller: PlannerKey) -> ConsoleComparison:
    return console_service.comparison(state, population_id)
