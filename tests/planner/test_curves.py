"""planner/curves.py pchip: scipy's PchipInterpolator bit for bit, without importing scipy.interpolate."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.interpolate import PchipInterpolator

from planner.curves import pchip


def _scipy(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    spline = PchipInterpolator(x, y, axis=0, extrapolate=True)
    return np.asarray(spline.c), np.asarray(spline.derivative()(x[0]))


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    # bit for bit: equal values, NaN where NaN, and the sign of every zero
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _tables(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A log-rate grid and log-noise columns as build_curves makes them (increasing, with flat
    stretches from its running maximum), and columns of every other shape PCHIP branches on
    (falling, zig-zag, constant, steps, repeated values)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 40))
    groups = int(rng.integers(1, 12))
    x = np.sort(rng.uniform(-12.0, 0.0, n))
    x[-1] = 0.0
    x = np.unique(x)
    n = x.size
    if n < 2:
        x = np.array([-1.0, 0.0])
        n = 2
    kind = seed % 5
    if kind == 0:  # build_curves' columns: rising, flattened where round-off dipped
        y = np.maximum.accumulate(np.cumsum(rng.normal(0.3, 0.4, (n, groups)), axis=0), axis=0)
    elif kind == 1:
        y = rng.normal(0.0, 3.0, (n, groups))
    elif kind == 2:
        y = np.round(rng.normal(0.0, 1.0, (n, groups)), 1)  # ties: zero slopes
    elif kind == 3:
        y = np.cumsum(rng.choice([-1.0, 0.0, 1.0], (n, groups)), axis=0) * rng.uniform(0.1, 10.0)
    else:
        y = np.full((n, groups), rng.normal())
    return x, y


@pytest.mark.parametrize("seed", range(400))
def test_pchip_is_scipys_bit_for_bit(seed: int) -> None:
    x, y = _tables(seed)
    ours, our_slope = pchip(x, y)
    theirs, their_slope = _scipy(x, y)
    assert _same_bits(ours, theirs)
    assert _same_bits(our_slope, their_slope)


@pytest.mark.parametrize(
    "x, y",
    [
        ([1.0, 2.0, 3.0], [[1.0], [np.nan], [2.0]]),
        ([1.0, 2.0, 3.0], [[1.0], [np.inf], [2.0]]),
        ([1.0, np.nan, 3.0], [[1.0], [1.5], [2.0]]),
        ([1.0, 1.0, 3.0], [[1.0], [1.5], [2.0]]),
        ([1.0], [[1.0]]),
    ],
)
def test_pchip_refuses_what_scipy_refused(x: list[float], y: list[list[float]]) -> None:
    """Non-finite values, x not strictly increasing, fewer than two points: scipy raised
    ValueError, and build_curves relies on that (a table whose infeasible entries are not a
    suffix must not become NaN pieces the allocation runs on)."""
    xs, ys = np.asarray(x), np.asarray(y)
    with pytest.raises(ValueError):
        PchipInterpolator(xs, ys, axis=0)
    with pytest.raises(ValueError, match="pchip"):
        pchip(xs, ys)


def test_build_curves_takes_a_column_from_its_first_infeasible_entry_on_as_infeasible() -> None:
    """A feasible entry above an infeasible one (not the suffix the table should have) was
    continued from a NaN: scipy's PCHIP refused the NaN table (a ValueError, not a curve). The
    column is now cut at its first infeasible entry: finite pieces, and the same curves as a
    table whose later entries are marked infeasible outright."""
    from planner.curves import build_curves

    rates = np.geomspace(1e-3, 1.0, 6)
    table = np.array([[1.0, 1.0], [1.1, 1.2], [np.nan, 1.5], [2.0, 2.0], [np.inf, 3.0], [np.inf, 4.0]])
    curves = build_curves(rates, table, np.ones(2))
    assert np.all(np.isfinite(curves.coefficients))
    cut = table.copy()
    cut[2:, 0] = np.inf
    expected = build_curves(rates, cut, np.ones(2))
    assert np.array_equal(curves.coefficients, expected.coefficients)
    assert np.array_equal(curves.rate_cap, expected.rate_cap) and curves.rate_cap[0] == rates[1]
