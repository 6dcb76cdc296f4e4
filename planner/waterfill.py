"""Exact KKT water-filling for the separable QP of the closed-form objective.

Problem (docs/planning.md §4.1)::

    minimise    sum_g  a_g x_g + b_g x_g^2
    subject to  sum_g  w_g x_g = total,    lo_g <= x_g <= hi_g

with b_g >= 0 and w_g > 0. The Lagrangian is stationary at
``x_g(lambda) = clip((lambda w_g - a_g) / (2 b_g), lo_g, hi_g)`` for b_g > 0; a group with
b_g = 0 is linear and sits at lo_g below its threshold a_g / w_g and at hi_g above it.
``S(lambda) = sum_g w_g x_g(lambda)`` is non-decreasing and piecewise linear between the
breakpoints (where a group reaches a bound) with jumps at linear groups' thresholds, so the
multiplier is found exactly. When every group is strictly convex, safeguarded Newton steps
on S (exact on the final piece, O(n) each, no sort) find it in a few steps; otherwise, or
if Newton's budget runs out, one sort of the breakpoints and cumulative sums of the
pieces' slopes and intercepts give S at every breakpoint, a search finds the piece that
contains ``total``, and on that piece S is linear. The problem is convex, so the KKT
point is the global optimum.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from accounting.errors import InfeasibleError


class WaterfillResult(NamedTuple):
    x: np.ndarray
    multiplier: float  # lambda: the marginal objective per unit of sum w x


def waterfill_qp(
    linear: np.ndarray,
    quadratic: np.ndarray,
    weights: np.ndarray,
    total: float,
    lower: np.ndarray,
    upper: np.ndarray,
) -> WaterfillResult:
    """Minimise ``sum a x + b x^2`` s.t. ``sum w x = total``, ``lo <= x <= hi`` exactly.

    Implements docs/planning.md §4.1 (KKT water-filling). ``linear`` = a, ``quadratic`` = b
    (>= 0), ``weights`` = w (> 0). Runs in O(n log n). Raises :class:`InfeasibleError` when
    ``total`` is outside ``[sum w lo, sum w hi]``.
    """
    a = np.asarray(linear, dtype=float)
    b = np.asarray(quadratic, dtype=float)
    w = np.asarray(weights, dtype=float)
    lo = np.asarray(lower, dtype=float)
    hi = np.asarray(upper, dtype=float)
    if not (a.shape == b.shape == w.shape == lo.shape == hi.shape) or a.ndim != 1:
        raise ValueError("waterfill_qp: all arrays must be 1-D of one length")
    if np.any(b < 0) or np.any(w <= 0) or np.any(lo > hi):
        raise ValueError("waterfill_qp: needs b >= 0, w > 0 and lo <= hi")
    total = float(total)
    floor, ceiling = float(np.dot(w, lo)), float(np.dot(w, hi))
    scale = max(abs(total), floor, ceiling, 1e-300)
    if total < floor - 1e-12 * scale:
        raise InfeasibleError(
            f"the lower bounds already need {floor:.6g} expected clients, more than {total:.6g}"
        )
    if total > ceiling + 1e-12 * scale:
        raise InfeasibleError(f"even the upper bounds give only {ceiling:.6g} expected clients, fewer than {total:.6g}")
    if total <= floor:
        return WaterfillResult(lo.copy(), float("-inf"))
    if total >= ceiling:
        return WaterfillResult(hi.copy(), float("inf"))

    strict = b > 0
    if strict.all():
        lam = _newton_multiplier(a, b, w, lo, hi, total, floor, ceiling)
        if lam is not None:
            x = np.clip((lam * w - a) / (2.0 * b), lo, hi)
            return WaterfillResult(repair_total(x, w, lo, hi, total), lam)
    linear_only = ~strict
    b_safe = np.where(strict, b, 1.0)
    threshold = a / w
    # S(lambda) = sum_g w_g x_g(lambda) is affine between events: a strict group adds slope
    # w^2/(2b) and intercept -a w/(2b) - w lo when it leaves lo (at (a + 2 b lo)/w) and trades
    # them for w hi when it reaches hi (at (a + 2 b hi)/w); a linear group jumps by
    # w (hi - lo) at a / w. One sort and two cumulative sums give S at every event.
    slope_g = np.where(strict, w * w / (2.0 * b_safe), 0.0)
    affine_g = np.where(strict, -a * w / (2.0 * b_safe), 0.0)
    enter = np.where(strict, (a + 2.0 * b * lo) / w, threshold)
    leave = (a + 2.0 * b * hi) / w
    if linear_only.any():
        s_idx = np.flatnonzero(strict)
        l_idx = np.flatnonzero(linear_only)
        at = np.concatenate([enter[s_idx], leave[s_idx], threshold[l_idx]])
        d_slope = np.concatenate([slope_g[s_idx], -slope_g[s_idx], np.zeros(len(l_idx))])
        d_icpt = np.concatenate(
            [affine_g[s_idx] - (w * lo)[s_idx], -affine_g[s_idx] + (w * hi)[s_idx], (w * (hi - lo))[l_idx]]
        )
    else:  # the usual case: every group strictly convex, no index gathering needed
        at = np.concatenate([enter, leave])
        d_slope = np.concatenate([slope_g, -slope_g])
        d_icpt = np.concatenate([affine_g - w * lo, w * hi - affine_g])
    order = np.argsort(at)  # ties: any order, only the state after the whole run is used
    at, d_slope, d_icpt = at[order], d_slope[order], d_icpt[order]
    slope = np.cumsum(d_slope)
    icpt = floor + np.cumsum(d_icpt)
    # keep the last entry of each run of equal event points: the state right after them
    last = np.r_[at[1:] != at[:-1], True]
    points, slope, icpt = at[last], slope[last], icpt[last]
    right = icpt + slope * points  # S(lambda+) at each event point
    j = int(np.searchsorted(right, total, side="left"))
    j = min(j, len(points) - 1)
    lam_j = float(points[j])
    prev_slope = slope[j - 1] if j > 0 else 0.0
    prev_icpt = icpt[j - 1] if j > 0 else floor
    left_limit = prev_icpt + prev_slope * lam_j  # S(lambda_j-)
    if left_limit < total or prev_slope <= 0:
        # total lies within the jump at lambda_j (or exactly at it): strict groups at their
        # stationary points, linear groups tied at the threshold share the rest in
        # proportion to their room, so equal groups get equal rates.
        lam = lam_j
        x = _stationary(a, b_safe, w, lo, hi, strict, lam)
        tied = linear_only & (threshold == lam)
        need = total - float(np.dot(w, x))
        room = w * (hi - lo) * tied
        if room.sum() > 0 and need > 0:
            x = np.where(tied, lo + min(1.0, need / room.sum()) * (hi - lo), x)
    else:
        # total lies strictly inside (points[j-1], points[j]): S is affine there.
        lam = (total - prev_icpt) / prev_slope
        x = _stationary(a, b_safe, w, lo, hi, strict, lam)
    x = repair_total(x, w, lo, hi, total)
    return WaterfillResult(x, float(lam))


def _newton_multiplier(
    a: np.ndarray,
    b: np.ndarray,
    w: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    total: float,
    floor: float,
    ceiling: float,
    max_iterations: int = 40,
) -> float | None:
    """The multiplier by safeguarded Newton steps on ``S(lambda) = total`` (all b > 0).

    ``S`` is piecewise linear and non-decreasing with slope ``sum_{g interior} w_g^2/(2 b_g)``
    (docs/planning.md §4.1). A Newton step from a point whose piece contains the root lands
    on the root exactly, so the iteration ends after the active set settles (a few steps in
    practice; O(n) each, no sort). Steps that would leave the bracket
    ``[lambda_lo, lambda_hi]`` (``S(lambda_lo) <= total <= S(lambda_hi)``) bisect instead.
    Returns None when the iteration budget runs out; the caller then uses the sort-based
    breakpoint search, which is exact in every case.
    """
    gain = w * w / (2.0 * b)
    offset = a * w / (2.0 * b)
    enter, leave = (a + 2.0 * b * lo) / w, (a + 2.0 * b * hi) / w
    lam_lo, lam_hi = float(enter.min()), float(leave.max())
    # Start where S would meet total if every group were interior.
    lam = float((total + offset.sum()) / gain.sum())
    if not lam_lo < lam < lam_hi:
        lam = 0.5 * (lam_lo + lam_hi)
    tolerance = 1e-13 * max(abs(total), ceiling - floor)
    for _ in range(max_iterations):
        x = (lam * w - a) / (2.0 * b)
        interior = (x > lo) & (x < hi)
        value = float(np.dot(w, np.clip(x, lo, hi)))
        gap = total - value
        if abs(gap) <= tolerance:
            return lam
        if gap > 0:
            lam_lo = lam
        else:
            lam_hi = lam
        slope = float(gain[interior].sum())
        step = lam + gap / slope if slope > 0 else lam_lo - 1.0
        lam = step if lam_lo < step < lam_hi else 0.5 * (lam_lo + lam_hi)
    return None


def _stationary(
    a: np.ndarray,
    b_safe: np.ndarray,
    w: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    strict: np.ndarray,
    lam: float,
) -> np.ndarray:
    """x_g(lambda): clipped stationary point for b > 0; lo for linear groups (below or at threshold)."""
    interior = np.clip((lam * w - a) / (2.0 * b_safe), lo, hi)
    linear_x = np.where(a / w < lam, hi, lo)
    return np.where(strict, interior, linear_x)


def repair_total(x: np.ndarray, w: np.ndarray, lo: np.ndarray, hi: np.ndarray, total: float) -> np.ndarray:
    """Remove the last floating-point residual of ``sum w x = total``.

    The residual (a few ulps) is spread over items with room on the needed side, in
    proportion to that room, so bounds stay satisfied and the equality holds to ~1e-15.
    """
    for _ in range(4):
        residual = total - float(np.dot(w, x))
        if residual == 0.0:
            break
        room = (hi - x) if residual > 0 else (x - lo)
        capacity = float(np.dot(w, room))
        if capacity <= 0:
            break
        x = np.clip(x + np.sign(residual) * room * min(1.0, abs(residual) / capacity), lo, hi)
    return x


def qp_objective(linear: np.ndarray, quadratic: np.ndarray, x: np.ndarray) -> float:
    """``sum a x + b x^2`` (the value waterfill_qp minimises)."""
    return float(np.dot(linear, x) + np.dot(quadratic, x * x))
