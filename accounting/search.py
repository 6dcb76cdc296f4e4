"""Monotone root finding with a proven bracket (docs/accounting.md §7).

Every inverse question is put in one shape: a variable x (log sigma, -log q, ...) and a
function g(x) = log(epsilon(x)) - log(target) that does not increase with x. x is
*feasible* when g(x) <= 0. :func:`bracket` finds lo < hi with g(lo) > 0 and g(hi) <= 0,
both by evaluation (never assumed); :func:`refine` shrinks [lo, hi] to width <= xtol.
Both return the evaluated, feasible end ``hi``: the answer never depends on an
extrapolation, so the result meets the target under the function that was evaluated.
:func:`guided` places the evaluations with a cheap model, :func:`vector_search` runs
bracket and refinement for many points at once, and :func:`integer_search` finds the
largest integer that fits (rdp's rounds), :func:`largest_fitting` the same by steps on log n from
a start, certified (pld's rounds). :func:`bracket_steps` and :func:`refine_steps` are
bracket and refine as generators that yield each point they need. :func:`lattice_steps` finds
the least feasible point of a lattice as a generator that yields one or two points a round, an
answer that does not depend on the path taken to it where g does not increase (where g rises
somewhere the answer is still an evaluated feasible point above an evaluated infeasible one, a
deterministic function of g and the start); :func:`lockstep` runs many such searches side by
side and answers each round's points in one call (pld's noise multipliers). The accountants (:mod:`accounting.accountants`) use
these; nothing here knows about privacy. Every search reads each g value through
:func:`infeasible_nan`: NaN is not <= 0, so a failed evaluation is infeasible.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from typing import NamedTuple, TypeVar

import numpy as np


class Bracket(NamedTuple):
    lo: float  # g(lo) > 0: infeasible (or the floor, when ``at_floor``)
    hi: float  # g(hi) <= 0: feasible, always evaluated
    g_lo: float
    g_hi: float
    evaluations: int
    at_floor: bool  # the floor itself is feasible: hi == floor, lo is meaningless


X = TypeVar("X")
V = TypeVar("V")
R = TypeVar("R")
F = TypeVar("F", float, np.ndarray)
# A search written as a generator: it yields the x it needs g at, is sent g(x), and returns its result.
Steps = Generator[float, float, R]


def infeasible_nan(value: F) -> F:
    """``value`` with NaN replaced by +inf: x is feasible where g(x) <= 0 and NaN <= 0 is false, so a
    failed evaluation is infeasible (docs/accounting.md §7). Every search here reads each g value
    through this one rule (a float or, for :func:`vector_search`, an array), so none mistakes a NaN
    (for which ``g > 0`` is false too) for a feasible point."""
    if isinstance(value, np.ndarray):
        return np.where(np.isnan(value), np.inf, value)
    return math.inf if value != value else value


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
    ``at_floor`` set and hi = x_min. :func:`bracket_steps` driven by ``g``.
    """
    return drive(bracket_steps(x0, x_min, x_max, first_step, slope), g)


def bracket_steps(
    x0: float, x_min: float, x_max: float, first_step: float = 0.05, slope: float = 1.0
) -> Steps[Bracket]:
    """:func:`bracket` as a generator: it yields each x it needs g at and is sent g(x), so
    that many searches can run in lockstep (:func:`lockstep`)."""
    x0 = min(max(x0, x_min), x_max)
    g0 = infeasible_nan((yield x0))
    evaluations = 1
    step = max(first_step, abs(g0) / slope * 1.25) if math.isfinite(g0) else first_step
    if g0 > 0:
        lo, g_lo = x0, g0
        while True:
            x = min(lo + step, x_max)
            gx = infeasible_nan((yield x))
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
        gx = infeasible_nan((yield x))
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
    most about 2 log2(width / xtol) + 2 even for a badly shaped g. :func:`refine_steps`
    driven by ``g``.
    """
    return drive(refine_steps(start, xtol, max_evaluations), g)


def refine_steps(start: Bracket, xtol: float, max_evaluations: int = 200) -> Steps[Bracket]:
    """:func:`refine` as a generator (as :func:`bracket_steps`)."""
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
        g_up = infeasible_nan((yield up))
        evaluations += 1
        if g_up > 0:
            extra = (lo, g_lo)
            lo, g_lo = up, g_up
        else:
            extra = (hi, g_hi)
            hi, g_hi = up, g_up
            down = max(up - xtol, lo + 0.25 * xtol)
            if down < hi and hi - lo > xtol:
                g_down = infeasible_nan((yield down))
                evaluations += 1
                if g_down > 0:
                    lo, g_lo = down, g_down
                else:
                    extra = (hi, g_hi)
                    hi, g_hi = down, g_down
        bisect_next = (hi - lo) > 0.5 * width
    return Bracket(lo, hi, g_lo, g_hi, evaluations, False)


def lattice_steps(
    x0: float,
    unit: float,
    x_min: float,
    x_max: float,
    slope: float = 1.0,
    expected: bool = False,
) -> Generator[list[float], list[float], Bracket]:
    """The smallest feasible point of the lattice ``x_k = k * unit`` in [x_min, x_max] (its two
    ends included as they are), as a generator that yields each round's points (one or two) and
    is sent their g values, in order (docs/accounting.md §7.8).

    The answer is a proven pair of neighbours: ``hi = x_k`` evaluated feasible and ``lo =
    x_{k-1}`` evaluated infeasible, so for a g that does not increase it is the same lattice
    point whichever way it was reached: a better start or estimate changes the cost, not the
    answer. A g that rises somewhere can cross the bracket (a pair's lower point feasible, its
    upper infeasible): the search then goes on from the least feasible point known and the
    largest infeasible one below it (down from it where there is none), so the answer is still a
    proven pair, a deterministic function of g and the start (docs/accounting.md §7.8). Each round estimates the root from what is known (a Newton step of the typical
    ``slope`` from one point, the secant through the two closest to the root, inverse quadratic
    interpolation in a bracket) and asks for the two lattice points around it, so an accurate
    estimate finishes in that round. Without a bracket, from the third round on, each jump at
    least doubles the last unless the estimates are closing in (a jump at most 1/``SHRINK`` of
    the last, none doubled yet); in a bracket a round that does not halve it is followed by a
    bisection, the first round inside it excepted; so it ends for any g. ``expected``: ``x0`` is the answer's likely lattice point (a neighbouring
    question's), and the first round asks it and the point below. The result is a
    :class:`Bracket` (``at_floor``: x_min itself is feasible); g(x_max) > 0 raises
    :class:`NoFeasiblePoint`. A NaN value is infeasible (it is not <= 0) and kept as +inf.
    """
    k_min, k_max = math.floor(x_min / unit), math.ceil(x_max / unit)

    def point(k: int) -> float:
        return min(max(k * unit, x_min), x_max)

    known: dict[int, float] = {}
    lo: int | None = None  # the largest k known infeasible
    hi: int | None = None  # the smallest k known feasible
    k0 = min(max(round(x0 / unit), k_min), k_max)
    ask = [k0 - 1, k0] if expected else [k0]
    jump = 1  # the last jump without a bracket
    misses = 0  # rounds that ended without a bracket
    growing = False  # a jump was doubled: every later one is at least double the last
    width = k_max - k_min
    in_bracket = 0  # rounds asked inside a bracket
    evaluations = 0
    while True:
        ask = sorted({k for k in ask if k_min <= k <= k_max and k not in known
                      and (lo is None or k > lo) and (hi is None or k < hi)})
        if not ask:  # unreachable (each branch below asks an unknown point inside the bracket)
            raise RuntimeError("lattice search: no unknown point left to ask")
        values = yield [point(k) for k in ask]
        evaluations += len(ask)
        for k, value in zip(ask, values, strict=True):
            gk = infeasible_nan(value)  # +inf for every test below
            known[k] = gk
            if gk > 0:
                lo = k if lo is None else max(lo, k)
            else:
                hi = k if hi is None else min(hi, k)
        if lo is not None and hi is not None and lo > hi:
            # a crossed bracket: g rose somewhere between hi and lo (it is not monotone there). The
            # least feasible point known stays the upper end; the lower is the largest infeasible
            # point known below it, or none (then the search goes down from hi), so the search
            # goes on inside the evaluated points, a deterministic function of g and the start
            below = [k for k in known if k < hi and known[k] > 0]
            lo = max(below) if below else None
        if hi is not None and hi == k_min:
            return Bracket(point(k_min), point(k_min), known[k_min], known[k_min], evaluations, True)
        if lo is not None and lo == k_max:
            raise NoFeasiblePoint(point(k_max), known[k_max])
        if lo is not None and hi is not None:
            if hi - lo == 1:
                return Bracket(point(lo), point(hi), known[lo], known[hi], evaluations, False)
            # the first round inside a bracket need not halve it (its far end is a stale guess)
            ask = _lattice_in_bracket(known, lo, hi, in_bracket > 1 and 2 * (hi - lo) > width)
            in_bracket += 1
            width = hi - lo
            continue
        # no bracket yet: every known point is on one side (``side`` +1: all infeasible, go up)
        side = 1 if lo is not None else -1
        edge = lo if lo is not None else hi
        assert edge is not None
        # the points on the searched side only (all of them where g is monotone): after a crossed
        # bracket, the infeasible points above hi say nothing of the root below it
        root, from_one = _lattice_root({k: v for k, v in known.items() if (v > 0) == (side > 0)}, slope * unit)
        misses += 1
        if root is None:  # only infinite values known: no estimate, bracket's first step
            step = max(math.ceil(0.05 / unit), 1)
        elif from_one:  # a Newton step: aim 25% beyond the root, to close the bracket
            step = max(math.ceil(1.25 * side * (root - edge)), 1)
        else:  # the secant: the two neighbours around the root
            step = max(math.ceil(side * (root - edge)) if side > 0 else math.floor(side * (root - edge)) + 1, 1)
        if misses > 2 and (growing or SHRINK * step > jump):
            # the estimates fell short twice: at least double the jump (ends for any g), unless they
            # are closing in (each jump at most 1/SHRINK of the last, before any doubling): a secant
            # next to the root that asked the pair just below it then lands, where doubling threw the
            # search tens of points past it and back (docs/accounting.md §7.8)
            step = max(step, 2 * jump)
            growing = True
        jump = step
        target = min(max(edge + side * step, k_min), k_max)  # edge < k_max (up) or > k_min (down)
        if from_one:
            ask = [target]
        else:
            ask = [target - 1, target] if side > 0 else [target, target + 1]


def _lattice_root(known: dict[int, float], slope_per_k: float) -> tuple[float | None, bool]:
    """The root in lattice units estimated from known points all on one side of it: the secant
    through the two closest to it (by |g|) where it falls, else a Newton step of ``slope_per_k``
    from the closest (then True); None where every known value is infinite."""
    closest = sorted((k for k in known if math.isfinite(known[k])), key=lambda k: abs(known[k]))[:2]
    if len(closest) == 2:
        (ka, ga), (kb, gb) = ((k, known[k]) for k in closest)
        if ga != gb and (gb - ga) / (kb - ka) < 0:
            return kb - gb * (kb - ka) / (gb - ga), False
    if closest:
        k = closest[0]
        return k + known[k] / slope_per_k, True
    return None, True


# Inside a bracket, an interpolated root this many lattice units or fewer from an evaluated
# point is trusted enough to ask for both of its neighbours in one round; farther, one point is
# asked and the next estimate comes from it (measured on the accounting bench's cases: the
# hard one, q 0.001 T 2000, 8 -> 7 evaluations; outside a bracket the same rule cost more).
PAIR_WITHIN = 24  # lattice points (units of ``unit`` in x)
# Outside a bracket, a jump at most 1/SHRINK of the last is the estimates closing in on the root,
# taken as it is; after the first doubled jump (or a larger one) every jump doubles, so the number of
# rounds stays logarithmic in the width for any g: shrinking by 4 at least, then doubling.
SHRINK = 4


def _lattice_in_bracket(known: dict[int, float], lo: int, hi: int, bisect: bool) -> list[int]:
    """The next points inside a proven bracket lo < hi (lattice units): the neighbours around the
    interpolated root, or the middle where ``bisect`` (the last round did not halve the bracket)."""
    if hi - lo == 2:
        return [lo + 1]
    if bisect:
        return [(lo + hi) // 2]
    extra = None
    others = [k for k in known if k not in (lo, hi) and math.isfinite(known[k])]
    if others:
        nearest = min(others, key=lambda k: abs(known[k]))
        extra = (float(nearest), known[nearest])
    root = _estimate(float(lo), float(hi), known[lo], known[hi], extra, False)
    target = min(max(math.ceil(root), lo + 2), hi - 1)
    if min(abs(root - k) for k in known) > PAIR_WITHIN:  # a long interpolation: one point, then a closer one
        return [target]
    return [target - 1, target]


def drive(steps: Generator[X, V, R], answer: Callable[[X], V]) -> R:
    """Run a search written as a generator (:func:`bracket_steps`, :func:`refine_steps`),
    answering each point it yields with ``answer``; its return value (or its exception)."""
    try:
        point = next(steps)
        while True:
            point = steps.send(answer(point))
    except StopIteration as stop:
        return stop.value


def lockstep(
    searches: Sequence[Generator[X, V, R]], answer_many: Callable[[list[tuple[int, X]]], Sequence[V]]
) -> list[R | Exception]:
    """Run many searches written as generators side by side (docs/accounting.md §7.7): each
    round collects the point every unfinished search asks for, as (its index, the point), and
    answers them all with one call of ``answer_many``. Each search takes exactly the steps it
    would take alone (:func:`drive`), so where ``answer_many`` answers every point as the
    one-point answer would, bit for bit, each result is the one-at-a-time result. A search
    that raises an :class:`Exception` has it as its result."""
    results: list[R | Exception | None] = [None] * len(searches)
    asking: dict[int, X] = {}

    def advance(index: int, value: V | None, first: bool) -> None:
        try:
            asking[index] = next(searches[index]) if first else searches[index].send(value)  # type: ignore[arg-type]
        except StopIteration as stop:
            asking.pop(index, None)
            results[index] = stop.value
        except Exception as exc:  # the search's own refusal (e.g. no feasible point), kept as its result
            asking.pop(index, None)
            results[index] = exc

    for index in range(len(searches)):
        advance(index, None, True)
    while asking:
        order = list(asking)
        values = answer_many([(index, asking[index]) for index in order])
        for index, value in zip(order, values, strict=True):
            advance(index, value, False)
    return results  # type: ignore[return-value]


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


def guided(
    g: Callable[[float], float],
    model: Callable[[float], float],
    x0: float,
    x_min: float,
    x_max: float,
    xtol: float,
    max_evaluations: int = 6,
) -> Bracket:
    """:func:`bracket` + :func:`refine` with the evaluations of g placed by a cheap model.

    ``model`` approximates g (same sign convention) and is trusted for nothing: it only
    says where to evaluate g. The estimate is the root of model(x) + d(x), where d is
    the model's error g - model at the evaluated points: constant after one evaluation,
    the line through the last two after that. g is evaluated at estimate + xtol/2, or,
    when the estimate lies within xtol of a known end, just inside the other side of it
    (hi - xtol or lo + xtol), which closes the bracket if the estimate was right: with
    a good model, two or three evaluations of g. Every evaluation of g updates the
    proven bracket; if it is not closed after ``max_evaluations`` (or the model has no
    root in [x_min, x_max]), :func:`bracket` and :func:`refine` finish from what is
    known. So the result has exactly the guarantees of those two: ``hi`` is evaluated
    and feasible, ``lo`` evaluated and infeasible, hi - lo <= xtol, or
    ``at_floor``/:class:`NoFeasiblePoint` as there.
    """
    lo, hi = -math.inf, math.inf
    g_lo, g_hi = math.nan, math.nan
    evaluations = 0
    errors: list[tuple[float, float]] = []  # (x, g(x) - model(x)) at evaluated points
    start = min(max(x0, x_min), x_max)
    previous = start  # no second point yet: _model_root takes a Newton-like step
    known: dict[float, float] = {}  # model values by x: each root search starts from two known ones

    def model_at(x: float) -> float:
        if x not in known:
            known[x] = model(x)
        return known[x]

    while evaluations < max_evaluations and hi - lo > xtol:
        estimate = _model_root(model_at, errors[-2:], start, previous, x_min, x_max, 0.02 * xtol)
        if estimate is None:
            break
        if hi - xtol < estimate <= hi:
            x = hi - 0.999 * xtol  # expected infeasible: closes the bracket
        elif lo <= estimate < lo + xtol:
            x = lo + 0.999 * xtol  # expected feasible: closes the bracket
        else:
            x = estimate + 0.5 * xtol
        x = min(max(x, x_min), x_max)
        if not lo < x < hi:
            break
        gx = infeasible_nan(g(x))
        evaluations += 1
        if gx > 0:
            lo, g_lo = x, gx
        else:
            hi, g_hi = x, gx
        error = gx - model_at(x)
        if not math.isfinite(error):
            break
        errors.append((x, error))
        start, previous = x, estimate
    if hi - lo <= xtol:
        return Bracket(lo, hi, g_lo, g_hi, evaluations, False)
    if math.isfinite(lo) and math.isfinite(hi):
        return refine(g, Bracket(lo, hi, g_lo, g_hi, evaluations, False), xtol)
    # One end is missing: the plain search from the best point known (it evaluates it again).
    restart = hi if math.isfinite(hi) else (lo if math.isfinite(lo) else start)
    found = bracket(g, restart, x_min, x_max)
    found = found._replace(evaluations=found.evaluations + evaluations)
    return found if found.at_floor else refine(g, found, xtol)


def _model_root(
    model: Callable[[float], float],
    errors: list[tuple[float, float]],
    x0: float,
    x1: float,
    x_min: float,
    x_max: float,
    xtol: float,
) -> float | None:
    """A root of model(x) + d(x) in [x_min, x_max] to within about xtol, d the constant or
    line through ``errors``; None if there is none. Secant steps from x0 and x1 (the model
    is smooth, so a few), else Illinois regula falsi on a bracket from :func:`bracket`."""
    if not errors:
        def shifted(x: float) -> float:
            return model(x)
    elif len(errors) == 1 or errors[0][0] == errors[1][0]:
        offset = errors[-1][1]

        def shifted(x: float) -> float:
            return model(x) + offset
    else:
        (xa, da), (xb, db) = errors
        slope = (db - da) / (xb - xa)

        def shifted(x: float) -> float:
            return model(x) + db + slope * (x - xb)

    x_a, f_a = x0, shifted(x0)
    if abs(x1 - x0) <= xtol or not x_min <= x1 <= x_max:
        # a Newton step with a typical slope dg/dx = -1.5 (epsilon ~ sigma^-1.5)
        step = min(max(abs(f_a) / 1.5, 1e-3), 1.0) if math.isfinite(f_a) else 0.01
        x1 = min(max(x0 + (step if f_a > 0 else -step), x_min), x_max)
    x_b, f_b = x1, shifted(x1)
    for _ in range(12):
        if not (math.isfinite(f_a) and math.isfinite(f_b)) or f_a == f_b:
            break
        x_c = x_b - f_b * (x_b - x_a) / (f_b - f_a)
        if not x_min <= x_c <= x_max:
            break
        if abs(x_c - x_b) <= xtol:
            return x_c
        x_a, f_a, x_b, f_b = x_b, f_b, x_c, shifted(x_c)
    return _illinois(shifted, x0, x_min, x_max, xtol)


def _illinois(f: Callable[[float], float], x0: float, x_min: float, x_max: float, xtol: float) -> float | None:
    """Root of a non-increasing f in [x_min, x_max] by Illinois regula falsi; None if none."""
    try:
        found = bracket(f, x0, x_min, x_max)
    except NoFeasiblePoint:
        return None
    if found.at_floor:
        return None
    a, b, fa, fb = found.lo, found.hi, found.g_lo, found.g_hi
    side = 0
    for _ in range(100):
        if b - a <= xtol:
            break
        x = 0.5 * (a + b)
        if math.isfinite(fa) and math.isfinite(fb) and fa != fb:
            secant = (a * fb - b * fa) / (fb - fa)
            if a < secant < b:
                x = secant
        fx = f(x)
        if fx > 0:
            a, fa = x, fx
            if side == 1:
                fb *= 0.5  # Illinois: halve the stale end so both ends move
            side = 1
        else:
            b, fb = x, fx
            if side == -1:
                fa *= 0.5
            side = -1
    return 0.5 * (a + b)


def log_ratio(value: float, target: float) -> float:
    """log(value / target) with 0 -> -inf and inf/NaN -> +inf (NaN counts as infeasible)."""
    if infeasible_nan(value) == math.inf:
        return math.inf
    if value <= 0:
        return -math.inf
    return math.log(value / target)


def integer_search(fits: Callable[[int], bool], upper: int) -> int:
    """Largest n in [0, upper] with fits(n), for fits monotone (true then false); fits(0) assumed."""
    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= upper and fits(hi):
        lo, hi = hi, hi * 2
    if hi > upper:
        if fits(upper):
            return upper
        hi = upper
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def largest_fitting(g: Callable[[int], float], upper: int, start: int, slope: float = 0.5) -> int:
    """Largest n in [0, upper] with g(n) <= 0 (n = 0 assumed to fit), g not decreasing in n, found
    by steps on log n (docs/accounting.md §7.4): the answer is certified, g(n) evaluated <= 0 and
    g(n + 1) evaluated > 0 (or n = upper fits, or g(1) > 0 and n = 0), so where g does not decrease
    every ``start`` lands on the same n: a better start changes the cost, not the answer.

    g is log(value / target) (:func:`log_ratio`); each round estimates where it crosses 0 on log n:
    a Newton step of ``slope`` (d g / d log n; 0.5 for an epsilon that grows like sqrt(n)) from one
    finite value, the secant through the two closest to 0 after that, and asks the integer below the
    estimate, then the one above it once a value at or below it fits. A NaN is infeasible
    (:func:`infeasible_nan`). Safeguards keep it logarithmic for any g: without a bracket, after
    two rounds each step goes at least twice as far as n (up) or half way to 1 (down); in a
    bracket, two rounds in a row that do not halve it are followed by a bisection; the neighbour
    that closes on the estimate (lo + 1 or hi - 1) is asked regardless, but not three rounds in a row."""
    known: dict[int, float] = {}
    lo, hi = 0, upper + 1  # lo fits (0 assumed), hi does not (upper + 1 never asked)
    n = min(max(start, 1), upper)
    misses = 0
    width = hi - lo
    bisect_next = False
    slow = 0  # rounds in a row that did not halve the bracket
    closed_last = 0  # rounds in a row that asked a closing neighbour
    while True:
        value = infeasible_nan(g(n))
        known[n] = value
        if value <= 0:
            lo = max(lo, n)
        else:
            hi = min(hi, n)
        if hi - lo <= 1:
            return lo
        bracketed = lo > 0 and hi <= upper
        if bracketed:  # two rounds in a row that did not halve the bracket: the next is a bisection
            slow = slow + 1 if 2 * (hi - lo) > width else 0
            bisect_next, width = slow >= 2, hi - lo
        estimate = _log_root(known, slope)
        if estimate is None:  # no finite value yet: halve the bracket, or double / halve n
            n = (lo + hi) // 2 if bracketed else (2 * lo if lo > 0 else max(hi // 2, 1))
        else:  # the pair around the estimate: its lower integer first, the upper once that fits
            below = math.floor(estimate)
            n = below + 1 if below <= lo else below
        n = min(max(n, lo + 1), hi - 1)
        # the neighbour that closes on the estimate (lo + 1, hi - 1) is asked whatever the safeguards
        # say, but not three rounds in a row: that would let a badly shaped g walk one integer a round
        closing = n in (lo + 1, hi - 1) and closed_last < 2
        if not closing and bracketed and bisect_next:
            n = (lo + hi) // 2
        elif not closing and not bracketed and estimate is not None:
            misses += 1
            if misses > 2:  # the estimates fell short twice: at least double (or halve)
                n = max(n, 2 * lo) if lo > 0 else min(n, max(hi // 2, 1))
        closed_last = closed_last + 1 if closing else 0
        n = min(max(n, lo + 1), hi - 1)


def _log_root(known: dict[int, float], slope: float) -> float | None:
    """Where g crosses 0, as a real n, from the known values on log n: the secant through the two
    finite values closest to 0 where it rises, else a Newton step of ``slope`` from the closest;
    None where no value is finite."""
    closest = sorted((k for k in known if math.isfinite(known[k])), key=lambda k: abs(known[k]))[:2]
    if not closest:
        return None
    if len(closest) == 2:
        (ka, ga), (kb, gb) = ((k, known[k]) for k in closest)
        rise = (gb - ga) / (math.log(kb) - math.log(ka))
        if rise > 0:
            root = math.log(kb) - gb / rise
            return math.exp(min(root, 700.0))
    k = closest[0]
    return math.exp(min(math.log(k) - known[k] / slope, 700.0))


def vector_search(
    g: Callable[[np.ndarray, np.ndarray], np.ndarray], x0: np.ndarray, x_min: float, x_max: float, xtol: float
) -> np.ndarray:
    """:func:`bracket` then :func:`refine`, run for many independent points at once (docs/accounting.md §7.6).

    Bracket (steps that double, away from x0) then the same two-probe regula falsi as
    :func:`refine`. Returns hi per point: feasible and evaluated; +inf where even
    x_max is infeasible; x_min where x_min is already feasible. A NaN value is infeasible
    (:func:`infeasible_nan`).
    """
    def checked(points: np.ndarray, x: np.ndarray) -> np.ndarray:
        return infeasible_nan(np.asarray(g(points, x), dtype=float))

    m = x0.size
    x0 = np.clip(x0, x_min, x_max)
    g0 = checked(np.arange(m), x0)
    lo = np.where(g0 > 0, x0, -np.inf)
    hi = np.where(g0 > 0, np.inf, x0)
    g_lo = np.where(g0 > 0, g0, np.nan)
    g_hi = np.where(g0 > 0, np.nan, g0)
    step = np.maximum(0.25, np.where(np.isfinite(g0), np.abs(g0) * 1.25, 0.25))
    result_inf = np.zeros(m, dtype=bool)
    at_floor = np.zeros(m, dtype=bool)
    # Bracketing: move the missing end until both exist.
    for _ in range(64):
        need_up = np.flatnonzero(~np.isfinite(hi) & ~result_inf)
        need_down = np.flatnonzero(~np.isfinite(lo) & ~at_floor)
        if need_up.size == 0 and need_down.size == 0:
            break
        if need_up.size:
            x = np.minimum(lo[need_up] + step[need_up], x_max)
            gx = checked(need_up, x)
            ok = gx <= 0
            hi[need_up[ok]], g_hi[need_up[ok]] = x[ok], gx[ok]
            bad = need_up[~ok]
            lo[bad], g_lo[bad] = x[~ok], gx[~ok]
            result_inf[bad[x[~ok] >= x_max]] = True
            step[need_up] *= 2.0
        if need_down.size:
            x = np.maximum(hi[need_down] - step[need_down], x_min)
            gx = checked(need_down, x)
            ok = gx > 0
            lo[need_down[ok]], g_lo[need_down[ok]] = x[ok], gx[ok]
            still = need_down[~ok]
            hi[still], g_hi[still] = x[~ok], gx[~ok]
            at_floor[still[x[~ok] <= x_min]] = True
            step[need_down] *= 2.0
    bisect_next = np.zeros(m, dtype=bool)
    for _ in range(200):
        active = np.flatnonzero(~result_inf & ~at_floor & (hi - lo > xtol))
        if active.size == 0:
            break
        a_lo, a_hi, a_glo, a_ghi = lo[active], hi[active], g_lo[active], g_hi[active]
        width = a_hi - a_lo
        usable = np.isfinite(a_glo) & np.isfinite(a_ghi) & (a_glo != a_ghi) & ~bisect_next[active]
        with np.errstate(invalid="ignore", divide="ignore"):
            estimate = np.where(usable, a_lo + a_glo * width / (a_glo - a_ghi), 0.5 * (a_lo + a_hi))
        up = np.minimum(np.maximum(estimate + 0.5 * xtol, a_lo + 0.25 * xtol), a_hi - 0.25 * xtol)
        g_up = checked(active, up)
        infeasible = g_up > 0
        lo[active[infeasible]], g_lo[active[infeasible]] = up[infeasible], g_up[infeasible]
        feasible_points = active[~infeasible]
        hi[feasible_points], g_hi[feasible_points] = up[~infeasible], g_up[~infeasible]
        down = np.maximum(up[~infeasible] - xtol, lo[feasible_points] + 0.25 * xtol)
        probe = (down < hi[feasible_points]) & (hi[feasible_points] - lo[feasible_points] > xtol)
        probe_points = feasible_points[probe]
        if probe_points.size:
            g_down = checked(probe_points, down[probe])
            above = g_down > 0
            lo[probe_points[above]], g_lo[probe_points[above]] = down[probe][above], g_down[above]
            below = probe_points[~above]
            hi[below], g_hi[below] = down[probe][~above], g_down[~above]
        bisect_next[active] = (hi[active] - lo[active]) > 0.5 * width
    out = hi.copy()
    out[result_inf] = np.inf
    out[at_floor] = x_min
    return out
