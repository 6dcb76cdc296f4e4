"""Monotone root finding with a proven bracket (docs/accounting.md §7).

Every inverse question is put in one shape: a variable x (log sigma, -log q, ...) and a
function g(x) = log(epsilon(x)) - log(target) that does not increase with x. x is
*feasible* when g(x) <= 0. :func:`bracket` finds lo < hi with g(lo) > 0 and g(hi) <= 0,
both by evaluation (never assumed); :func:`refine` shrinks [lo, hi] to width <= xtol.
Both return the evaluated, feasible end ``hi``: the answer never depends on an
extrapolation, so the result meets the target under the function that was evaluated.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple


class Bracket(NamedTuple):
    lo: float  # g(lo) > 0: infeasible (or the floor, when ``at_floor``)
    hi: float  # g(hi) <= 0: feasible, always evaluated
    g_lo: float
    g_hi: float
    evaluations: int
    at_floor: bool  # the floor itself is feasible: hi == floor, lo is meaningless


class NoFeasiblePoint(Exception):
    """Even the largest allowed x (the cap) is infeasible."""

    def __init__(self, x_max: float, g_max: float) -> None:
        super().__init__(f"infeasible at the cap x={x_max}")
        self.x_max = x_max
        self.g_max = g_max


def bracket(
    g: Callable[[float], float],
    x0: float,
    x_min: float,
    x_max: float,
    first_step: float = 0.05,
    slope: float = 1.0,
) -> Bracket:
    """Find lo < hi, g(lo) > 0 >= g(hi), starting at x0 and staying in [x_min, x_max].

    Steps grow geometrically (each at least double the last) away from x0 in the
    direction that g's sign asks for; the first step is g(x0)/slope when that is larger
    than ``first_step`` (slope: a typical |dg/dx|), so a good guess brackets in 2 calls.
    Raises :class:`NoFeasiblePoint` if g(x_max) > 0. If g(x_min) <= 0 the result has
    ``at_floor`` set and hi = x_min.
    """
    x0 = min(max(x0, x_min), x_max)
    g0 = g(x0)
    evaluations = 1
    step = max(first_step, abs(g0) / slope * 1.25) if math.isfinite(g0) else first_step
    if g0 > 0:
        lo, g_lo = x0, g0
        while True:
            x = min(lo + step, x_max)
            gx = g(x)
            evaluations += 1
            if gx <= 0:
                return Bracket(lo, x, g_lo, gx, evaluations, False)
            if x >= x_max:
                raise NoFeasiblePoint(x_max, gx)
            step = _next_step(step, lo, g_lo, x, gx)
            lo, g_lo = x, gx
    hi, g_hi = x0, g0
    while True:
        x = max(hi - step, x_min)
        gx = g(x)
        evaluations += 1
        if gx > 0:
            return Bracket(x, hi, gx, g_hi, evaluations, False)
        if x <= x_min:
            return Bracket(x_min, x_min, gx, gx, evaluations, True)
        step = _next_step(step, hi, g_hi, x, gx)
        hi, g_hi = x, gx


def _next_step(step: float, x_a: float, g_a: float, x_b: float, g_b: float) -> float:
    """At least double the step; more when the secant through the last two points says
    the root is further (by 25%, to land beyond it)."""
    doubled = 2.0 * step
    if not (math.isfinite(g_a) and math.isfinite(g_b)) or g_a == g_b:
        return doubled
    distance = abs(g_b * (x_b - x_a) / (g_a - g_b))
    return max(doubled, 1.25 * distance) if math.isfinite(distance) else doubled


def refine(g: Callable[[float], float], start: Bracket, xtol: float, max_evaluations: int = 200) -> Bracket:
    """Shrink a proven bracket to hi - lo <= xtol; return it (the answer is ``hi``).

    Each round estimates the root r by inverse quadratic interpolation through the two
    ends and the previous probe (regula falsi while only two points are known; g is
    close to linear in these coordinates), evaluates r + xtol/2 and, if that is
    feasible, r - xtol/2: an accurate estimate finishes in two calls. An estimate
    outside the bracket is replaced by the regula falsi point, and a round that fails to
    halve the bracket makes the next estimate the midpoint, so the number of calls is at
    most about 2 log2(width / xtol) + 2 even for a badly shaped g.
    """
    lo, hi, g_lo, g_hi = start.lo, start.hi, start.g_lo, start.g_hi
    evaluations = start.evaluations
    if start.at_floor:
        return start
    bisect_next = False
    extra: tuple[float, float] | None = None  # a third evaluated point, for interpolation
    while hi - lo > xtol and evaluations - start.evaluations < max_evaluations:
        width = hi - lo
        estimate = _estimate(lo, hi, g_lo, g_hi, extra, bisect_next)
        up = min(max(estimate + 0.5 * xtol, lo + 0.25 * xtol), hi - 0.25 * xtol)
        g_up = g(up)
        evaluations += 1
        if g_up > 0:
            extra = (lo, g_lo)
            lo, g_lo = up, g_up
        else:
            extra = (hi, g_hi)
            hi, g_hi = up, g_up
            down = max(up - xtol, lo + 0.25 * xtol)
            if down < hi and hi - lo > xtol:
                g_down = g(down)
                evaluations += 1
                if g_down > 0:
                    lo, g_lo = down, g_down
                else:
                    extra = (hi, g_hi)
                    hi, g_hi = down, g_down
        bisect_next = (hi - lo) > 0.5 * width
    return Bracket(lo, hi, g_lo, g_hi, evaluations, False)


def _estimate(
    lo: float, hi: float, g_lo: float, g_hi: float, extra: tuple[float, float] | None, bisect: bool
) -> float:
    """Root estimate inside (lo, hi): inverse quadratic, else regula falsi, else midpoint."""
    middle = 0.5 * (lo + hi)
    if bisect or not (math.isfinite(g_lo) and math.isfinite(g_hi)) or g_lo == g_hi:
        return middle
    secant = lo + g_lo * (hi - lo) / (g_lo - g_hi)
    if extra is None or not math.isfinite(extra[1]):
        return secant
    x2, g2 = extra
    if g2 in (g_lo, g_hi):
        return secant
    # Lagrange interpolation of x as a function of g, evaluated at g = 0.
    quadratic = (
        lo * g_hi * g2 / ((g_lo - g_hi) * (g_lo - g2))
        + hi * g_lo * g2 / ((g_hi - g_lo) * (g_hi - g2))
        + x2 * g_lo * g_hi / ((g2 - g_lo) * (g2 - g_hi))
    )
    return quadratic if lo < quadratic < hi and math.isfinite(quadratic) else secant


def log_ratio(value: float, target: float) -> float:
    """log(value / target) with 0 -> -inf and inf/NaN -> +inf (NaN counts as infeasible)."""
    if value != value or value == math.inf:
        return math.inf
    if value <= 0:
        return -math.inf
    return math.log(value / target)
