"""Shared helpers for the accounting tests: seeded random cases and reference accountants."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest

CASE_SEED = 20240611
DELTAS = (1e-3, 1e-5, 1e-6)


def random_cases(count: int, seed: int = CASE_SEED, max_rounds: int = 2000) -> list[tuple[float, float, int, float]]:
    """(q, sigma, T, delta): q log-uniform in [1e-3, 1] (a tenth of them exactly 1), sigma
    log-uniform in [0.3, 20], T log-uniform in [1, max_rounds], delta from DELTAS."""
    rng = np.random.default_rng(seed)
    cases = []
    for index in range(count):
        q = 1.0 if index % 10 == 9 else float(10 ** rng.uniform(-3, 0))
        sigma = float(10 ** rng.uniform(np.log10(0.3), np.log10(20)))
        rounds = int(round(10 ** rng.uniform(0, np.log10(max_rounds))))
        delta = float(DELTAS[int(rng.integers(len(DELTAS)))])
        cases.append((q, sigma, max(rounds, 1), delta))
    return cases


def dp_rdp_epsilon(q: float, sigma: float, rounds: int, delta: float) -> float:
    """Google dp-accounting's RdpAccountant on PoissonSampled(Gaussian) self-composed T times."""
    import dp_accounting

    accountant = dp_accounting.rdp.RdpAccountant()
    accountant.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), rounds)
    return float(accountant.get_epsilon(delta))


PLD_INTERVAL = 1e-3


def dp_pld_epsilon(q: float, sigma: float, rounds: int, delta: float) -> float:
    """dp-accounting's (pessimistic) PLD accountant with value_discretization_interval 1e-3."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=PLD_INTERVAL)
    accountant.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), rounds)
    return float(accountant.get_epsilon(delta))


def pld_slack(rounds: int, epsilon: float) -> float:
    """How far dp-accounting's pessimistic PLD may sit above the true epsilon: each of the
    T compositions rounds the privacy loss up by at most one interval, plus 1% relative
    for the tail truncation."""
    return rounds * PLD_INTERVAL + 0.01 * epsilon


@pytest.fixture(autouse=True)
def _quiet_reference_libraries() -> None:
    # dp-accounting logs a warning per non-converging fractional order; it is expected.
    logging.getLogger("absl").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
