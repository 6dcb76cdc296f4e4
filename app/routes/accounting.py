"""``/v1/accounting/*``: the accountants over HTTP, same requests and answers as
``gdpfed account`` (``accounting.requests``). Runs on the time-limited compute pool."""

from __future__ import annotations

from fastapi import APIRouter

from accounting.requests import (
    EpsilonRequest,
    NoiseMultiplierRequest,
    RoundsRequest,
    SamplingRateRequest,
)
from accounting.results import Calibration, EpsilonReport
from app.deps import PlannerKey, State
from app.services.accounting import run_request

router = APIRouter(prefix="/v1/accounting", tags=["accounting"])


@router.post("/epsilon", response_model=EpsilonReport, summary="epsilon spent (after optional spent events)")
async def epsilon(body: EpsilonRequest, state: State, _caller: PlannerKey) -> EpsilonReport:
    return await run_request(state, body)  # type: ignore[return-value]


@router.post("/noise-multiplier", response_model=Calibration, summary="smallest noise multiplier meeting epsilon")
async def noise_multiplier(body: NoiseMultiplierRequest, state: State, _caller: PlannerKey) -> Calibration:
    return await run_request(state, body)  # type: ignore[return-value]


@router.post("/sampling-rate", response_model=Calibration, summary="largest sampling rate meeting epsilon")
async def sampling_rate(body: SamplingRateRequest, state: State, _caller: PlannerKey) -> Calibration:
    return await run_request(state, body)  # type: ignore[return-value]


@router.post("/rounds", response_model=Calibration, summary="most rounds meeting epsilon")
async def rounds(body: RoundsRequest, state: State, _caller: PlannerKey) -> Calibration:
    return await run_request(state, body)  # type: ignore[return-value]
