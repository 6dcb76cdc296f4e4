"""The empirical auditor (accounting/audit.py) on mechanisms whose exact epsilon is known."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from accounting import InvalidInputError
from accounting.audit import clopper_pearson_upper, epsilon_lower_bound


def _gaussian_exact_epsilon(shift: float, delta: float) -> float:
    """The exact epsilon of N(0,1) vs N(shift,1) at delta (Balle and Wang 2018's analytic Gaussian)."""

    def delta_of(eps: float) -> float:
        return float(stats.norm.cdf(shift / 2 - eps / shift) - math.exp(eps) * stats.norm.cdf(-shift / 2 - eps / shift))

    lo, hi = 0.0, 50.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if delta_of(mid) > delta else (lo, mid)
    return hi


def test_clopper_pearson_matches_the_beta_quantile_and_covers() -> None:
    assert clopper_pearson_upper(0, 100, 0.05) == pytest.approx(1 - 0.05 ** (1 / 100))
    assert clopper_pearson_upper(100, 100, 0.05) == 1.0
    rng = np.random.default_rng(0)
    misses = sum(clopper_pearson_upper(int(rng.binomial(200, 0.1)), 200, 0.05) < 0.1 for _ in range(2000))
    assert misses / 2000 <= 0.05 + 0.015


@pytest.mark.parametrize("shift", [0.5, 1.0, 2.0])
def test_the_bound_is_below_the_exact_epsilon_and_not_vacuous(shift: float) -> None:
    rng = np.random.default_rng(int(shift * 10))
    delta = 1e-5
    exact = _gaussian_exact_epsilon(shift, delta)
    result = epsilon_lower_bound(rng.normal(size=200_000), rng.normal(shift, 1.0, size=200_000), delta)
    assert result.epsilon_lower <= exact
    assert result.epsilon_lower >= 0.4 * exact  # the test has power


def test_identical_mechanisms_give_no_evidence_and_bad_input_is_refused() -> None:
    rng = np.random.default_rng(1)
    assert epsilon_lower_bound(rng.normal(size=50_000), rng.normal(size=50_000), 1e-5).epsilon_lower < 0.1
    with pytest.raises(InvalidInputError) as error:
        epsilon_lower_bound(np.zeros(10), np.zeros(10), 1e-5, confidence=1.0)
    assert error.value.field == "confidence"
    with pytest.raises(InvalidInputError) as error:
        epsilon_lower_bound(np.zeros(10), np.zeros(10), 0.0)
    assert error.value.field == "delta"
