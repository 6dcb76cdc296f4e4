"""Exact KKT water-filling for the separable QP of the closed-form objective.

Problem (docs/planning.md §4.1)::

    minimise    sum_g  a_g x_g + b_g x_g^2
    subject to  sum_g  w_g x_g = total,    lo_g <= x_g <= hi_g

with b_g >= 0 and w_g > 0. The Lagrangian is stationary at
``x_g(lambda) = clip((lambda w_g - a_g) / (2 b_g), lo_g, hi_g)`` for b_g > 0; a group with
b_g = 0 is linear and sits at lo_g below its threshold a_g / w_g and at hi_g above it.
``S(lambda) = sum_g w_g x_g(lambda)`` is non-decreasing and piecewise linear between the
breakpoints (where a group reaches a bound) with jumps at linear groups' thresholds, so the
multiplier is found exactly: a binary search over the sorted breakpoints finds the piece
that contains ``total``, and on that piece S is linear. The problem is convex, so the KKT
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
    linear_only = ~strict
    b_safe = np.where(strict, b, 1.0)
    # Breakpoints: a strict group leaves lo at (a + 2 b lo) / w and reaches hi at
    # (a + 2 b hi) / w; a linear group jumps from lo to hi at a / w.
    enter = np.where(strict, (a + 2.0 * b * lo) / w, a / w)
    leave = np.where(strict, (a + 2.0 * b * hi) / w, a / w)
    points = np.unique(np.concatenate([enter, leave]))

    def supply(lam: float, linear_at_tie_high: bool) -> float:
        x = _stationary(a, b_safe, w, lo, hi, strict, lam)
        threshold = a / w
        if linear_at_tie_high:
            x = np.where(linear_only & (threshold <= lam), hi, x)
        return float(np.dot(w, x))

    # Smallest breakpoint whose right limit S(lambda+) reaches total.
    left, right = 0, len(points) - 1
    while left < right:
        mid = (left + right) // 2
        if supply(points[mid], True) >= total:
            right = mid
        else:
            left = mid + 1
    j = left
    lam_j = float(points[j])
    s_minus = supply(lam_j, False)
    if s_minus <= total:
        # total lies within the jump at lambda_j (or exactly at it): strict groups stay at
        # their stationary points, linear groups tied at the threshold share the rest in
        # proportion to their room, so equal groups get equal rates.
        x = _stationary(a, b_safe, w, lo, hi, strict, lam_j)
        tied = linear_only & np.isclose(a / w, lam_j, rtol=1e-12, atol=0.0)
        room = w * (hi - lo) * tied
        need = total - s_minus
        if room.sum() > 0 and need > 0:
            share = min(1.0, need / room.sum())
            x = np.where(tied, lo + share * (hi - lo), x)
    else:
        # total lies strictly inside (points[j-1], points[j]): S is linear there.
        lam_prev = float(points[j - 1])
        s_prev = supply(lam_prev, True)
        lam = lam_prev + (total - s_prev) / (s_minus - s_prev) * (lam_j - lam_prev)
        lam_j = lam
        x = _stationary(a, b_safe, w, lo, hi, strict, lam)
        x = np.where(linear_only & (a / w < lam), hi, x)
    x = _repair_total(x, w, lo, hi, total)
    return WaterfillResult(x, lam_j)


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


def _repair_total(x: np.ndarray, w: np.ndarray, lo: np.ndarray, hi: np.ndarray, total: float) -> np.ndarray:
    """Remove the last floating-point residual of ``sum w x = total``.

    The residual (a few ulps) is spread over groups with room on the needed side, in
    proportion to that room, so bounds stay satisfied and the equality holds to ~1e-15.
    """
    for _ in range(3):
        residual = total - float(np.dot(w, x))
        if residual == 0.0:
            break
        room = (hi - x) if residual > 0 else (x - lo)
        capacity = float(np.dot(w, room))
        if capacity <= 0:
            break
        x = x + np.sign(residual) * room * min(1.0, abs(residual) / capacity)
        x = np.clip(x, lo, hi)
    return x


def qp_objective(linear: np.ndarray, quadratic: np.ndarray, x: np.ndarray) -> float:
    """``sum a x + b x^2`` (the value waterfill_qp minimises)."""
    return float(np.dot(linear, x) + np.dot(quadratic, x * x))
