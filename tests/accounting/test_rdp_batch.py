"""The batched RDP paths of issue 26 §2 answer bit for bit what the per-point ones do.

``rdp.rdp_curves`` (many sampled-Gaussian curves in one call) and
``RdpAccountant.epsilons`` (many histories in one call, what a plan's verification uses,
docs/planning.md §8) must equal ``rdp.rdp_curve`` and ``RdpAccountant.epsilon`` exactly,
not approximately: a plan's verified epsilons are compared with golden digests
(tests/planner/test_plan_digests.py), and the batch must not be an optimistic shortcut.
"""

from __future__ import annotations

import numpy as np
import pytest

import accounting
from accounting import rdp
from accounting.accountants import get_accountant
from accounting.errors import InvalidInputError
from accounting.events import ApproximateDpEvent, PoissonSampledGaussian, ZeroConcentratedDp


def _points(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    q = np.exp(rng.uniform(np.log(1e-4), np.log(0.9), n))
    sigma = np.exp(rng.uniform(np.log(0.3), np.log(50.0), n))
    q[::7] = 1.0  # full participation: the plain Gaussian branch
    return q, sigma


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rdp_curves_equal_rdp_curve_row_by_row(seed: int) -> None:
    q, sigma = _points(seed, 40)
    curves = rdp.rdp_curves(q, sigma)
    assert curves.shape == (40, rdp.default_orders().size)
    for k in range(q.size):
        np.testing.assert_array_equal(curves[k], rdp.rdp_curve(float(q[k]), float(sigma[k])))


def test_rdp_curves_on_another_grid_and_of_nothing() -> None:
    grid = rdp.order_grid([1.5, 2, 3, 7.25, 32])
    q, sigma = _points(3, 9)
    curves = rdp.rdp_curves(q, sigma, grid)
    for k in range(q.size):
        np.testing.assert_array_equal(curves[k], rdp.rdp_curve(float(q[k]), float(sigma[k]), grid))
    assert rdp.rdp_curves(np.zeros(0), np.zeros(0)).shape == (0, rdp.default_orders().size)


def test_epsilons_equal_epsilon_history_by_history() -> None:
    q, sigma = _points(4, 12)
    phases = [
        PoissonSampledGaussian(sampling_rate=float(a), noise_multiplier=float(b), steps=int(s))
        for a, b, s in zip(q, sigma, np.random.default_rng(5).integers(1, 5000, q.size))
    ]
    histories: list[list[ApproximateDpEvent]] = [
        [phases[0]],
        [phases[1], phases[2]],  # a re-planned history: two phases composed
        [phases[3], ZeroConcentratedDp(rho=0.01, steps=3), phases[4]],  # an event without a sampled curve
        [ZeroConcentratedDp(rho=0.2, steps=1)],
    ]
    histories += [[p] for p in phases[5:]]
    chosen = get_accountant("rdp")
    for delta in (1e-3, 1e-6):
        batch = chosen.epsilons(histories, delta)
        assert batch == [chosen.epsilon(h, delta) for h in histories]
        assert accounting.epsilons_of_histories(histories, delta, "rdp") == batch


def test_epsilons_of_histories_checks_like_epsilon_of_events() -> None:
    phase = PoissonSampledGaussian(sampling_rate=0.1, noise_multiplier=1.0, steps=10)
    with pytest.raises(InvalidInputError, match="at least one event"):
        accounting.epsilons_of_histories([[phase], []], 1e-5)
    with pytest.raises(InvalidInputError, match="describes one phase"):
        accounting.epsilons_of_histories([[phase, phase]], 1e-5, "closed_form")
    assert accounting.epsilons_of_histories([[phase]], 1e-5, "closed_form") == [
        accounting.epsilon_of_events([phase], 1e-5, "closed_form")
    ]


def test_default_grid_is_built_once_and_cannot_be_written() -> None:
    grid = rdp.order_grid()
    assert rdp.order_grid() is grid
    with pytest.raises(ValueError):
        grid.term_log_binom[0] = 0.0
    np.testing.assert_array_equal(grid.orders, rdp.default_orders())
    # a grid of its own is still built fresh, and writable by its owner
    own = rdp.order_grid([2, 3])
    assert own is not rdp.order_grid([2, 3])
