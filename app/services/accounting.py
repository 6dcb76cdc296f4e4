"""Accounting requests: validated by ``accounting.requests`` (shared with the CLI) and
answered by ``accounting.requests.answer`` on the time-limited compute pool."""

from __future__ import annotations

from accounting.requests import AccountingRequest, answer
from accounting.results import Calibration, EpsilonReport
from app.deps import AppState


async def run_request(state: AppState, request: AccountingRequest) -> EpsilonReport | Calibration:
    return await state.compute.run_async(answer, request)
