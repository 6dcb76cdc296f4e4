"""Fixtures every test folder shares (tests/accounting, tests/planner, ...): counters around the
accountants' costly calls, so the count tests of each package assert on one definition."""

from __future__ import annotations

import pytest


@pytest.fixture
def sound_epsilons_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, float]]:
    """Each call of pld's ``sound_epsilons`` from here on (one round of a lockstep search, or one
    question's evaluation): how many histories it composed, and at which delta."""
    from accounting.accountants import pld

    calls: list[tuple[int, float]] = []
    real = pld.sound_epsilons

    def counted(histories: list, delta: float) -> list:
        calls.append((len(histories), delta))
        return real(histories, delta)

    monkeypatch.setattr(pld, "sound_epsilons", counted)
    return calls

