"""Separable resource allocation by water-filling on convexified curves (docs/planning.md §4.2).

Problem::

    minimise    sum_j f_j(x_j)
    subject to  sum_j w_j x_j = total,    lo_j <= x_j <= hi_j

where each f_j is only available as a (vectorised) function, possibly non-convex (the
numeric sigma(q)^2 is concave at very small q). The Lagrangian relaxation
``min_x f_j(x) - lambda w_j x`` is solved per item on a fine grid (a minimum of a linear
tilt over a set is attained at a vertex of its lower convex hull, so this is water-filling
on the convexified curves, globally), refined inside the winning grid cell by golden-section
search, and lambda is found by bisection so that ``sum w x`` brackets ``total``. The two
bracketing allocations are mixed to meet the constraint exactly; an item that jumps between
hull vertices at the final lambda then sits on a hull chord (at most a few items do), and
for up to POLISH_LIMIT items a local SLSQP descent on the true costs then removes most of
that relaxation gap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from accounting.errors import InfeasibleError
from planner.waterfill import repair_total

Cost = Callable[[np.ndarray], np.ndarray]  # x: (n_items, k) -> f_j(x[j, :]) with the same shape

_GOLDEN = (np.sqrt(5.0) - 1.0) / 2.0
# Local polishing (SLSQP) runs when at most this many items share the allocation.
POLISH_LIMIT = 64


class Allocation(NamedTuple):
    x: np.ndarray
    multiplier: float


def candidate_grid(lower: np.ndarray, upper: np.ndarray, points: int) -> np.ndarray:
    """Per-item candidate points in [lo, hi]: log-spaced (curves bend most at small x), ends included."""
    lo = np.asarray(lower, dtype=float)
    hi = np.asarray(upper, dtype=float)
    u = np.linspace(0.0, 1.0, points)
    positive_lo = np.where(lo > 0, lo, np.maximum(hi * 1e-6, 1e-300))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(hi > positive_lo, hi / positive_lo, 1.0)
    grid = positive_lo[:, None] * ratio[:, None] ** u[None, :]
    grid[:, 0] = lo
    grid[:, -1] = hi
    return np.minimum(np.maximum(grid, lo[:, None]), hi[:, None])


def allocate(
    cost: Cost,
    weights: np.ndarray,
    total: float,
    lower: np.ndarray,
    upper: np.ndarray,
    *,
    grid_points: int = 192,
    refine_iterations: int = 26,
) -> Allocation:
    """Minimise ``sum f_j(x_j)`` s.t. ``sum w x = total`` and bounds (docs/planning.md §4.2).

    Raises :class:`InfeasibleError` when ``total`` is outside ``[sum w lo, sum w hi]``.
    The result meets the equality to ~1e-15 relative and the bounds exactly.
    """
    w = np.asarray(weights, dtype=float)
    lo = np.asarray(lower, dtype=float)
    hi = np.asarray(upper, dtype=float)
    total = float(total)
    floor, ceiling = float(np.dot(w, lo)), float(np.dot(w, hi))
    scale = max(abs(total), ceiling, 1e-300)
    if total < floor - 1e-12 * scale:
        raise InfeasibleError(f"the lower bounds already need {floor:.6g}, more than {total:.6g}")
    if total > ceiling + 1e-12 * scale:
        raise InfeasibleError(f"the upper bounds allow only {ceiling:.6g}, less than {total:.6g}")
    if total <= floor:
        return Allocation(lo.copy(), float("-inf"))
    if total >= ceiling:
        return Allocation(hi.copy(), float("inf"))

    grid = candidate_grid(lo, hi, grid_points)
    values = cost(grid)
    rows = np.arange(len(w))

    def argmin_at(lam: float) -> np.ndarray:
        tilted = values - lam * w[:, None] * grid
        return np.argmin(tilted, axis=1)

    def refined(lam: float) -> np.ndarray:
        index = argmin_at(lam)
        left = grid[rows, np.maximum(index - 1, 0)]
        right = grid[rows, np.minimum(index + 1, grid_points - 1)]
        x = _golden_minimise(lambda z: cost(z) - lam * w[:, None] * z, left, right, refine_iterations)
        # keep the grid point when refinement did not improve on it (flat or kinked cells)
        at_grid = grid[rows, index]
        better = cost(x[:, None])[:, 0] - lam * w * x < values[rows, index] - lam * w * at_grid
        return np.where(better, x, at_grid)

    with np.errstate(divide="ignore", invalid="ignore"):
        slopes = np.diff(values, axis=1) / (w[:, None] * np.diff(grid, axis=1))
    slopes = slopes[np.isfinite(slopes)]
    span = float(np.max(np.abs(slopes))) if slopes.size else 1.0
    lam_lo = float(np.min(slopes)) - 1.0 - span if slopes.size else -1.0
    lam_hi = float(np.max(slopes)) + 1.0 + span if slopes.size else 1.0

    # Phase 1: the grid alone (cheap) locates lambda to the jump where sum w x crosses total.
    for _ in range(200):
        lam = 0.5 * (lam_lo + lam_hi)
        if not lam_lo < lam < lam_hi or lam_hi - lam_lo <= 1e-12 * max(1.0, abs(lam)):
            break
        if float(np.dot(w, grid[rows, argmin_at(lam)])) < total:
            lam_lo = lam
        else:
            lam_hi = lam

    # Phase 2: with in-cell refinement, re-bracket around that lambda and bisect again.
    centre = 0.5 * (lam_lo + lam_hi)
    # refinement moves each item within one grid cell, which shifts lambda by at most a
    # few per cent of its value: start the bracket there and widen if needed
    step = max(0.02 * abs(centre), 1e-12 * span, 1e-300)
    lo_lam, hi_lam = centre - step, centre + step
    x_lo, x_hi = refined(lo_lam), refined(hi_lam)
    s_lo, s_hi = float(np.dot(w, x_lo)), float(np.dot(w, x_hi))
    for _ in range(200):
        if s_lo < total <= s_hi:
            break
        step *= 4.0
        if s_lo >= total:
            lo_lam = centre - step
            x_lo = refined(lo_lam)
            s_lo = float(np.dot(w, x_lo))
        if s_hi < total:
            hi_lam = centre + step
            x_hi = refined(hi_lam)
            s_hi = float(np.dot(w, x_hi))
    if not s_lo < total <= s_hi:
        x_lo, s_lo, x_hi, s_hi = lo.copy(), floor, hi.copy(), ceiling
    # Illinois (regula falsi): S is smooth in lambda away from jumps, so this converges in a
    # few steps; a step that fails to shrink the bracket enough falls back to bisection.
    f_lo, f_hi = s_lo - total, s_hi - total
    last = 0  # which end moved last: -1 low, +1 high
    for _ in range(100):
        if s_hi - s_lo <= 1e-7 * scale or not lo_lam < hi_lam or f_hi == f_lo:
            break
        lam = hi_lam - f_hi * (hi_lam - lo_lam) / (f_hi - f_lo)
        if not lo_lam < lam < hi_lam:
            lam = 0.5 * (lo_lam + hi_lam)
            if lam in (lo_lam, hi_lam):
                break
        x = refined(lam)
        s = float(np.dot(w, x))
        if s < total:
            lo_lam, x_lo, s_lo, f_lo = lam, x, s, s - total
            if last == -1:
                f_hi *= 0.5
            last = -1
        else:
            hi_lam, x_hi, s_hi, f_hi = lam, x, s, s - total
            if last == 1:
                f_lo *= 0.5
            last = 1
        # refinement is accurate to ~1e-7 of a cell, so a closer match buys nothing; the
        # final mix of the two bracketing allocations meets the total exactly
        if abs(s - total) <= 1e-7 * scale:
            break
    theta = (total - s_lo) / (s_hi - s_lo) if s_hi > s_lo else 1.0
    x = np.clip(x_lo + theta * (x_hi - x_lo), lo, hi)
    x = repair_total(x, w, lo, hi, total)
    jumped = np.abs(x_hi - x_lo) > 1e-6 * np.maximum(hi - lo, 1e-300)
    if np.any(jumped) and len(w) <= POLISH_LIMIT:
        x = _polish(cost, w, total, lo, hi, x)
    return Allocation(x, 0.5 * (lo_lam + hi_lam))


def _polish(cost: Cost, w: np.ndarray, total: float, lo: np.ndarray, hi: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Local SLSQP from the relaxed solution when an item sits on a hull chord.

    The convexified problem's solution is globally optimal for the hull; where an item
    lands on a chord (a non-convex stretch of its curve) the true curve lies above, and a
    local descent on the true costs recovers most of that gap (docs/planning.md §4.2).
    Kept only if it lowers the objective and stays feasible.
    """
    from scipy.optimize import minimize

    def objective(x: np.ndarray) -> float:
        return float(cost(np.clip(x, lo, hi)[:, None])[:, 0].sum())

    scale = max(abs(total), 1e-300)
    result = minimize(
        objective,
        start,
        method="SLSQP",
        bounds=list(zip(lo, hi)),
        constraints=[{"type": "eq", "fun": lambda x: (float(w @ x) - total) / scale, "jac": lambda x: w / scale}],
        options={"maxiter": 200, "ftol": 1e-12},
    )
    candidate = repair_total(np.clip(result.x, lo, hi), w, lo, hi, total)
    if abs(float(w @ candidate) - total) <= 1e-12 * scale and objective(candidate) < objective(start):
        return candidate
    return start


def _golden_minimise(fn: Cost, left: np.ndarray, right: np.ndarray, iterations: int) -> np.ndarray:
    """Vectorised golden-section search of fn_j on [left_j, right_j] (unimodal there).

    One new evaluation per item and iteration: the kept interior point is reused.
    """
    a, b = left.copy(), right.copy()
    c = b - _GOLDEN * (b - a)
    d = a + _GOLDEN * (b - a)
    fc = fn(c[:, None])[:, 0]
    fd = fn(d[:, None])[:, 0]
    for _ in range(iterations):
        go_left = fc < fd
        b = np.where(go_left, d, b)
        a = np.where(go_left, a, c)
        kept = np.where(go_left, c, d)
        f_kept = np.where(go_left, fc, fd)
        fresh = np.where(go_left, b - _GOLDEN * (b - a), a + _GOLDEN * (b - a))
        f_fresh = fn(fresh[:, None])[:, 0]
        c = np.where(go_left, fresh, kept)
        fc = np.where(go_left, f_fresh, f_kept)
        d = np.where(go_left, kept, fresh)
        fd = np.where(go_left, f_kept, f_fresh)
    return 0.5 * (a + b)
