"""prv: bounds against dp-accounting's PLD, and the fence around prv_accountant (docs §5)."""

from __future__ import annotations

import math
import time

import pytest

import accounting
from accounting import Phase, prv
from tests.accounting.conftest import dp_pld_epsilon, pld_slack, random_cases


def test_prv_upper_is_above_dp_accounting_pld_on_30_seeded_cases() -> None:
    used_prv = 0
    for q, sigma, rounds, delta in random_cases(30, seed=99, max_rounds=1000):
        report = accounting.epsilon(q, sigma, rounds, delta, accountant="prv", time_limit_s=8)
        pld = dp_pld_epsilon(q, sigma, rounds, delta)
        assert math.isfinite(report.epsilon) and report.epsilon >= 0
        assert report.epsilon >= pld - pld_slack(rounds, pld), (q, sigma, rounds, delta, report, pld)
        if report.fallback:
            assert report.accountant_used == "rdp" and report.reason
            continue
        used_prv += 1
        assert report.lower <= report.estimate <= report.upper == report.epsilon
        # PRV is tighter than rdp
        assert report.upper <= accounting.epsilon(q, sigma, rounds, delta).epsilon * (1 + 1e-6) + 0.05
    assert used_prv >= 20


def test_prv_composes_heterogeneous_phases() -> None:
    phases = [Phase(sampling_rate=0.02, noise_multiplier=1.1, steps=300), Phase(sampling_rate=0.05, noise_multiplier=2.0, steps=100)]
    report = accounting.epsilon_of_phases(phases, 1e-5, accountant="prv")
    assert not report.fallback
    assert report.upper <= accounting.epsilon_of_phases(phases, 1e-5).epsilon
    first = accounting.epsilon_of_phases(phases[:1], 1e-5, accountant="prv")
    assert report.estimate > first.estimate


def test_inputs_that_break_prv_fall_back_to_sound_rdp() -> None:
    for q, sigma, rounds in [(1.0, 0.1, 1000), (0.5, 0.3, 100)]:
        start = time.monotonic()
        report = accounting.epsilon(q, sigma, rounds, 1e-5, accountant="prv", time_limit_s=10)
        assert time.monotonic() - start < 15
        assert report.fallback and report.accountant == "prv" and report.accountant_used == "rdp"
        assert report.reason and "fell back to rdp" in report.reason
        assert math.isfinite(report.epsilon)
        assert report.epsilon == accounting.epsilon(q, sigma, rounds, 1e-5).epsilon


def _sleep_forever(*args: object) -> None:
    time.sleep(600)


def test_a_hanging_prv_is_killed_at_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prv, "bounds_in_process", _sleep_forever)
    start = time.monotonic()
    report = accounting.epsilon(0.01, 1.0, 100, 1e-5, accountant="prv", time_limit_s=1.0)
    assert time.monotonic() - start < 5
    assert report.fallback and "did not finish within 1 s" in report.reason

    monkeypatch.setattr(prv, "calibrate_sigma_in_process", _sleep_forever)
    start = time.monotonic()
    result = accounting.noise_multiplier(0.01, 100, 1.0, 1e-5, accountant="prv", time_limit_s=1.0)
    assert time.monotonic() - start < 5
    assert result.fallback and result.accountant_used == "rdp" and result.epsilon <= 1.0


def _raise(*args: object) -> None:
    raise OverflowError("boom")


def _negative(*args: object) -> tuple[float, float, float]:
    return prv.checked_bounds((-1.0, -0.5, -0.1))


def test_exceptions_and_bad_numbers_in_the_child_fall_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The reason users read states what prv could not do and what answered instead; the
    exception's type and text (``prv failed: OverflowError: boom`` before) and the numbers
    are logged at debug level, never put in the answer (docs/accounting.md §5.3)."""
    caplog.set_level("DEBUG", logger="gdpfed.accounting")
    monkeypatch.setattr(prv, "bounds_in_process", _raise)
    report = accounting.epsilon(0.01, 1.0, 100, 1e-5, accountant="prv")
    assert report.fallback and report.reason == f"{prv.PRV_RAISED}; fell back to rdp"
    assert "OverflowError: boom" in caplog.text
    monkeypatch.setattr(prv, "bounds_in_process", _negative)
    report = accounting.epsilon(0.01, 1.0, 100, 1e-5, accountant="prv")
    assert report.fallback and report.reason == "prv's epsilon bounds came out negative or out of order; fell back to rdp"
    assert "bounds (-1.0, -0.5, -0.1)" in caplog.text


def test_checked_bounds_rejects_non_finite() -> None:
    with pytest.raises(prv.PrvFailure):
        prv.checked_bounds((1.0, math.inf, math.inf))
    with pytest.raises(prv.PrvFailure):
        prv.checked_bounds((1.0, math.nan, 2.0))
    assert prv.checked_bounds((-0.01, 0.1, 0.2)) == (0.0, 0.1, 0.2)


def test_isolation_overhead_is_small() -> None:
    # Not a timing assertion on the accountant: the fork+pipe fence itself must not cost
    # seconds (bench/accounting.py reports the measured overhead).
    start = time.monotonic()
    assert prv.run_isolated(abs, (-3,), 5.0) == 3
    assert time.monotonic() - start < 2.0


def test_prv_rounds_and_sampling_rate_meet_target() -> None:
    rounds = accounting.rounds(0.01, 1.0, 2.0, 1e-5, accountant="prv")
    assert not rounds.fallback and rounds.epsilon <= 2.0
    assert rounds.rounds >= accounting.rounds(0.01, 1.0, 2.0, 1e-5).rounds
    assert dp_pld_epsilon(0.01, 1.0, rounds.rounds, 1e-5) <= 2.0 + pld_slack(rounds.rounds, 2.0)
    rate = accounting.sampling_rate(1.0, 300, 2.0, 1e-5, accountant="prv")
    assert not rate.fallback and rate.epsilon <= 2.0
    assert rate.sampling_rate >= accounting.sampling_rate(1.0, 300, 2.0, 1e-5).sampling_rate


def test_prv_remaining_budget() -> None:
    spent = [Phase(sampling_rate=0.02, noise_multiplier=1.0, steps=200)]
    result = accounting.rounds(0.02, 1.0, 3.0, 1e-5, accountant="prv", spent=spent)
    assert not result.fallback and result.spent_epsilon is not None
    assert result.spent_epsilon <= result.epsilon <= 3.0
    history = [*spent, Phase(sampling_rate=0.02, noise_multiplier=1.0, steps=result.rounds)]
    assert accounting.epsilon_of_phases(history, 1e-5, accountant="prv").epsilon <= 3.0 + 0.03
