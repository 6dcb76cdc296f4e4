"""The Poisson-subsampled distributed Skellam mechanism (docs/accounting.md §11.6).

The discrete path of secure aggregation (docs/secure-aggregation.md, "Discrete noise:
the distributed Skellam mechanism"): each included client sends its update scaled,
rotated and rounded to an integer vector of L2 norm at most ``l2_sensitivity`` (and L1
norm at most ``l1_sensitivity``; conditional rounding makes both bounds exact), plus an
integer Skellam noise share; the server learns the integer sum plus Skellam noise of
total per-coordinate ``variance`` (the honest survivors' shares; sums of independent
Skellams are Skellam). Everything is in grid units (integers): the sensitivities and
the variance are those of the integer vectors, not of the real-valued update.

RDP, for an integer order a >= 2, without sampling (Agarwal, Kairouz, Liu 2021, "The
Skellam Mechanism for Differentially Private Federated Learning", Thm 3.5 / Cor 3.6):

    e(a) = a D2^2 / (2 mu) + min(((2a - 1) D2^2 + 6 D1) / (4 mu^2), 3 D1 / (2 mu)).

Poisson subsampling at rate q: Zhu and Wang 2019 ("Poisson Subsampled Renyi
Differential Privacy", Thm 6, the general upper bound for integer orders), taking the
smaller of it and e(a). A fractional order takes the value of the next integer order
(RDP is non-decreasing in the order, so that is an upper bound). ``steps`` releases
compose by adding curves (docs/accounting.md §4).

The tight accountant (pld) reads the event through :func:`gaussian_domination`: one
round of the vector Skellam mechanism, for every integer shift within (D1, D2), is
dominated (in the Blackwell / trade-off sense) by the Gaussian pair N(m, 1) vs N(0, 1)
with m = m1 D2, m1 read off the exact Skellam pmf, up to a tail mass eta that is added to
delta (docs/accounting.md §11.7).
"""

from __future__ import annotations

import functools
import math
from typing import Literal, NamedTuple

import numpy as np
import pydantic

from accounting.events.base import ApproximateDpEvent
from accounting.rdp import SMALL_LOG_A, OrderGrid
from accounting.special import gammaln
from accounting.validation import PositiveReal, SamplingRate, Steps

# Positive finite reals (a variance far below a noise multiplier's domain falls back, §11.7).
_Positive = PositiveReal


def skellam_rdp(order: int, variance: float, l2_sensitivity: float, l1_sensitivity: float) -> float:
    """The Skellam mechanism's RDP at an integer order >= 2 (Agarwal et al. 2021; docs/accounting.md §11.6)."""
    return float(_skellam_rdp_at(np.array([float(order)]), variance, l2_sensitivity, l1_sensitivity)[0])


def skellam_rdp_curve(top: int, variance: float, l2_sensitivity: float, l1_sensitivity: float) -> np.ndarray:
    """:func:`skellam_rdp` at every order 2 .. ``top``, at its own index (entries 0 and 1 are 0):
    the ``base`` of :func:`subsampled_rdp_curve` (docs/accounting.md §11.6)."""
    base = np.zeros(top + 1)
    base[2:] = _skellam_rdp_at(np.arange(2, top + 1, dtype=float), variance, l2_sensitivity, l1_sensitivity)
    return base


def _skellam_rdp_at(orders: np.ndarray, variance: float, l2_sensitivity: float, l1_sensitivity: float) -> np.ndarray:
    """e(a) of §11.6 at every order of ``orders`` (floats of integers >= 2), each entry by the same
    operations in the same order as the scalar formula (a Python loop over 1,023 orders took 2 ms
    of every curve, issue 26)."""
    a, mu, d2sq, d1 = orders, variance, l2_sensitivity**2, l1_sensitivity
    square = 4.0 * mu * mu  # 0 where mu^2 underflows (mu below 1e-154): that term is then unbounded
    third = 3.0 * d1 / (2.0 * mu)
    # Python's floats overflow to inf silently: so do these
    with np.errstate(over="ignore", invalid="ignore"):
        second = ((2.0 * a - 1.0) * d2sq + 6.0 * d1) / square if square > 0 else np.full(a.shape, math.inf)
        # min(second, third) as Python's min: the first argument unless the second is smaller
        return a * d2sq / (2.0 * mu) + np.where(third < second, third, second)


def _logsumexp(values: np.ndarray) -> float:
    """log(sum(exp(values))) of a 1-D float array, value for value ``scipy.special.logsumexp``
    (scipy 1.17's real path): the largest term is taken out of the sum and added back as
    log1p(rest / m) + log(m) + max, m the count of terms equal to the max; a non-finite result
    is replaced by the direct log(sum(exp)). scipy's array-API wrapper cost 0.13 ms a call,
    198 calls per 3-group plan, a quarter of make_plan (issue 26 section 2)."""
    if values.size == 0:
        return -math.inf
    # numpy's ufuncs on one-element arrays, as scipy: its log/log1p/exp may differ from libm's
    # in the last bit
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        direct = np.log(np.sum(np.exp(values), keepdims=True))
        top = np.max(values, keepdims=True)
        at_top = values == top
        count = np.sum(at_top.astype(float), keepdims=True)
        rest = np.sum(np.exp(np.where(at_top, -np.inf, values) - top), keepdims=True)
        rest = np.where(rest == 0, rest, rest / count)
        sign = np.sign(rest + 1) * np.sign(count)
        out = np.log1p(rest) + np.log(count) + top
        out = np.where(sign < 0, np.nan, out)
    return float(out[0] if np.isfinite(out[0]) else direct[0])


def _segment_logsumexp(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """:func:`_logsumexp` of each segment ``values[starts[k]:starts[k + 1]]`` (the last to the
    end; none empty), value for value: the same elementwise operations on every entry (numpy's
    ufuncs give an entry the same value wherever it sits in a contiguous array), the maximum and
    the count of ties per segment (exact in any order), and each segment's sum of the shifted
    exponentials by ``np.add.reduce`` on that segment alone, the very call ``np.sum`` makes on
    it (a segmented ``np.add.reduceat`` adds in another order, a different last bit). A segment
    whose result is not finite is computed by :func:`_logsumexp` itself (docs/accounting.md §11.6,
    "Computing the curve")."""
    bounds = [*starts.tolist(), values.size]
    lengths = np.diff(np.asarray(bounds))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        top = np.maximum.reduceat(values, starts)
        each = np.repeat(top, lengths)
        at_top = values == each
        count = np.add.reduceat(at_top.astype(float), starts)
        shifted = np.exp(np.where(at_top, -np.inf, values) - each)
        rest = np.array([np.add.reduce(shifted[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:])])
        rest = np.where(rest == 0, rest, rest / count)
        sign = np.sign(rest + 1) * np.sign(count)
        out = np.log1p(rest) + np.log(count) + top
        out = np.where(sign < 0, np.nan, out)
    for k in np.flatnonzero(~np.isfinite(out)).tolist():
        out[k] = _logsumexp(values[bounds[k] : bounds[k + 1]])
    return out


class _ZhuWangTerms(NamedTuple):
    """The q-independent parts of :func:`subsampled_rdp_curve`'s sums for one tuple of orders: term t
    of order ``orders[k]`` is l = ``l[t]`` (2 .. a), laid out order by order; each order's row of
    the logsumexp is its first term (l = 0, 1 together) then its l terms (``row_starts``;
    docs/accounting.md §11.6, "Computing the curve")."""

    orders: np.ndarray  # the integer orders a, as floats
    ls: np.ndarray  # l of each term, as a float
    l_index: np.ndarray  # l of each term, as an index into base
    a_minus_l: np.ndarray
    l_minus_1: np.ndarray
    log_binom: np.ndarray  # log C(a, l)
    tripled: np.ndarray  # the terms of l >= 3 (their factor 3)
    term_starts: np.ndarray  # each order's first term
    row_starts: np.ndarray  # each order's row in the layout with its first term
    first_at: np.ndarray  # where each order's first term sits in that layout
    term_at: np.ndarray  # where each term sits in it


@functools.lru_cache(maxsize=8)
def _zhu_wang_terms(orders: tuple[int, ...]) -> _ZhuWangTerms:
    """The terms of :func:`subsampled_rdp_curve` for ``orders`` (one tuple per order grid, built once;
    its arrays read-only, docs/accounting.md §11.6)."""
    alphas = np.asarray(orders, dtype=int)
    per_order = alphas - 1  # l = 2 .. a
    term_alpha = np.repeat(alphas, per_order)
    term_starts = np.concatenate(([0], np.cumsum(per_order)[:-1])).astype(int)
    l_int = np.arange(term_alpha.size) - np.repeat(term_starts, per_order) + 2
    # gammaln (accounting/special.py: scipy 1.17's values, docs/accounting.md §13.10) of each integer
    # once: the same values as gammaln(a + 1.0) - gammaln(l + 1.0) -
    # gammaln(a - l + 1.0) computed term by term (one elementwise function of the same inputs)
    log_gamma = gammaln(np.arange(int(alphas.max()) + 2, dtype=float))  # log_gamma[k] = gammaln(k)
    log_binom = log_gamma[term_alpha + 1] - log_gamma[l_int + 1] - log_gamma[term_alpha - l_int + 1]
    rows = np.arange(alphas.size)
    terms = _ZhuWangTerms(
        orders=alphas.astype(float),
        ls=l_int.astype(float),
        l_index=l_int,
        a_minus_l=term_alpha.astype(float) - l_int.astype(float),
        l_minus_1=l_int.astype(float) - 1.0,
        log_binom=log_binom,
        tripled=l_int >= 3,
        term_starts=term_starts,
        row_starts=term_starts + rows,
        first_at=term_starts + rows,
        term_at=np.arange(term_alpha.size) + np.repeat(rows, per_order) + 1,
    )
    # one cached value for every caller and every thread of the service: read-only, so no
    # caller can change the terms the next curve is computed from
    for array in terms:
        array.flags.writeable = False
    return terms


def subsampled_rdp(order: int, sampling_rate: float, base: np.ndarray) -> float:
    """Zhu and Wang 2019's general bound for Poisson subsampling at an integer order >= 2
    (:func:`subsampled_rdp_curve` at that one order)."""
    return float(subsampled_rdp_curve((order,), sampling_rate, base)[0])


def subsampled_rdp_curve(orders: tuple[int, ...], sampling_rate: float, base: np.ndarray) -> np.ndarray:
    """Zhu and Wang 2019's general bound for Poisson subsampling at each integer order >= 2 of ``orders``.

    ``base[l]`` is the unsampled mechanism's RDP at order l (entries 2 .. max(orders) used).
    The bound is

        1/(a-1) log[ (1-q)^(a-1) (a q - q + 1) + C(a,2) q^2 (1-q)^(a-2) e^(e(2))
                     + 3 sum_{l=3}^{a} C(a,l) q^l (1-q)^(a-l) e^((l-1) e(l)) ],

    and the smaller of it and ``base[a]`` is returned for each a (docs/accounting.md §11.6).
    Every order's sum is computed by the same operations as a loop over the orders, one
    order at a time, would: the terms of all orders in one array (:func:`_zhu_wang_terms`),
    each order's logsumexp by :func:`_segment_logsumexp`. The loop cost 66 calls of about
    50 microseconds per curve, 10x the continuous rdp plan's time (issue 26).
    """
    if sampling_rate >= 1.0:
        return np.array([float(base[a]) for a in orders])
    q, terms = sampling_rate, _zhu_wang_terms(tuple(orders))
    log_q, log_1q = math.log(q), math.log1p(-q)
    weights = terms.log_binom + terms.ls * log_q + terms.a_minus_l * log_1q
    spread = terms.l_minus_1 * base[terms.l_index]  # (l - 1) e(l)
    summed = weights + spread
    summed[terms.tripled] += math.log(3.0)
    layout = np.empty(summed.size + len(orders))
    layout[terms.first_at] = [(a - 1) * log_1q + math.log(a * q - q + 1.0) for a in orders]
    layout[terms.term_at] = summed
    log_total = _segment_logsumexp(layout, terms.row_starts)
    small = np.flatnonzero(log_total < SMALL_LOG_A)
    if small.size:
        # The bracket is 1 + something that may be below double precision at tiny q (the
        # plain log rounds it to 0): since sum_l C(a,l) q^l (1-q)^(a-l) = 1 and the first term
        # is its l = 0, 1 terms, bracket - 1 = sum_{l>=2} C(a,l) q^l (1-q)^(a-l) (c_l e^(...) - 1)
        # with c_2 = 1, c_l = 3, all terms >= 0: sum that and take log1p (docs/accounting.md §2.4).
        exponent = spread.copy()  # log(c_l) + (l-1) e(l)
        exponent[terms.tripled] += math.log(3.0)
        with np.errstate(divide="ignore"):
            log_excess = exponent + np.log(-np.expm1(-exponent))  # log(e^x - 1), -inf where x = 0
        excess = _segment_logsumexp(weights + log_excess, terms.term_starts)
        for k in small.tolist():
            log_total[k] = math.log1p(math.exp(float(excess[k])))
    values = log_total / (terms.orders - 1.0)
    at_order = base[np.asarray(orders, dtype=int)]
    # min(base[a], value) as Python's min: base[a] unless the value is smaller (a NaN value keeps base[a])
    return np.where(values < at_order, values, at_order)


def top_order(orders: np.ndarray) -> int:
    """The largest integer order :func:`zhu_wang_rdp` reads ``base`` at for a grid of ``orders``
    (docs/accounting.md §11.6)."""
    return max(int(np.ceil(np.asarray(orders, dtype=float)).max(initial=2.0)), 2)


def zhu_wang_rdp(orders: np.ndarray, sampling_rate: float, base: np.ndarray) -> np.ndarray:
    """:func:`subsampled_rdp_curve` read at every order of a grid (docs/accounting.md §11.6): a
    fractional order takes the next integer's value, an order below 2 order 2's."""
    ceilings = np.maximum(np.ceil(np.asarray(orders, dtype=float)).astype(int), 2)
    if ceilings.size == 0:
        return np.zeros(0)
    distinct, at = np.unique(ceilings, return_inverse=True)
    return subsampled_rdp_curve(tuple(distinct.tolist()), sampling_rate, base)[at]


# docs/accounting.md §11.7. Vertices of the trade-off curve are checked where the Skellam's
# tail P(X > j) is at least e^TAIL_LOG_FLOOR; the mass beyond is eta, added to delta.
TAIL_LOG_FLOOR = math.log(1e-150)
# The table sums the pmf up to a reach whose tail beyond is below e^REACH_LOG_TAIL (Chernoff's
# bound): a relative 1e-20 of every tail the table keeps, far inside DOMINATION_MARGIN.
REACH_LOG_TAIL = TAIL_LOG_FLOOR - 46.0
# m1 is raised by this relative margin: it covers the rounding of the pmf (Debye's expansion or
# scipy's ive), of the tail sums and of ndtri; the two pmfs' m1 differ by < 1e-9 relative where
# both compute (4e-10 at mu = 5e8).
DOMINATION_MARGIN = 1e-8
# Above this variance the pmf is not tabulated and pld answers the event by rdp (docs/accounting.md
# §11.7, §13.4): the table would hold more than 2.8e6 points.
MAX_TABULATED_VARIANCE = 1e10
# From this variance on the pmf is Debye's expansion (:func:`log_skellam_pmf_large`), within 1e-12
# of scipy's ive from 1e3 on and three to five times cheaper; ive (AMOS) also returns nan from an
# argument of 2^30 (about 1.07e9) on.
DEBYE_VARIANCE = 1e4
# Debye's expansion is evaluated this many points at a time: its dozen temporaries then stay in
# the cache (about 1.5x faster on a table of 2e5 points than one pass over the whole array).
_DEBYE_CHUNK = 1 << 14


def log_skellam_pmf_large(js: np.ndarray, variance: float) -> np.ndarray:
    """log(e^-x I_n(x)), x = ``variance``, n = |``js``|, by Debye's uniform expansion to U_3.

    I_n(n z) ~ e^(n eta) / ((2 pi n)^(1/2) (1 + z^2)^(1/4)) sum_k U_k(p) / n^k, p = 1 / sqrt(1 + z^2)
    (Abramowitz and Stegun 9.7.7), written with r = sqrt(n^2 + x^2) so that n = 0 is the
    Hankel expansion 1 + 1/(8x) + 9/(128 x^2) + ...: n eta - x = w - n asinh(n / x) with
    w = n^2 / (r + x) and asinh(n / x) = log1p((n + w) / x) (no cancellation at n << x),
    U_k(p) / n^k = r^-k (a polynomial in p^2 = n^2 / r^2). The first term left out is of order
    x^-4 (1e-32 at x = 1e8); within 1e-12 of scipy's ive where both compute (1e3 to 1e9).
    """
    n = np.abs(np.asarray(js, dtype=float))
    if n.size > _DEBYE_CHUNK:
        out = np.empty_like(n)
        for start in range(0, n.size, _DEBYE_CHUNK):
            out.flat[start : start + _DEBYE_CHUNK] = log_skellam_pmf_large(n.flat[start : start + _DEBYE_CHUNK], variance)
        return out
    x = float(variance)
    n2 = n * n
    r2 = n2 + x * x
    r = np.sqrt(r2)
    w = n2 / (r + x)
    p2 = n2 / r2
    a = 1.0 / r
    u3 = (30375.0 + p2 * (-369603.0 + p2 * (765765.0 - 425425.0 * p2))) / 414720.0
    u2 = (81.0 + p2 * (-462.0 + 385.0 * p2)) / 1152.0
    u1 = (3.0 - 5.0 * p2) / 24.0
    series = a * (u1 + a * (u2 + a * u3))  # U_1 / r + U_2 / r^2 + U_3 / r^3
    return w - n * np.log1p((n + w) / x) - 0.5 * math.log(2.0 * math.pi) - 0.5 * np.log(r) + np.log1p(series)


def table_reach(variance: float) -> int:
    """The least j >= 40 with Chernoff's bound on P(X >= j) at most e^REACH_LOG_TAIL, X ~ Sk(``variance``).

    P(X >= k) <= exp(-(k asinh(k/mu) - mu (sqrt(1 + (k/mu)^2) - 1))) (E e^(l X) = e^(mu (cosh l - 1))
    at l = asinh(k/mu)); the exponent falls in k, so a bisection finds the threshold. The table
    then needs one pass: the pmf at the reach is below the floor, and the mass beyond it is
    a relative 1e-20 of the smallest tail kept (docs/accounting.md §11.7).
    """
    mu = float(variance)

    def log_bound(k: float) -> float:
        ratio = k / mu
        square = ratio * ratio
        return mu * square / (math.sqrt(1.0 + square) + 1.0) - k * math.asinh(ratio)

    lo, hi = 0.0, max(1.0, math.sqrt(-2.0 * mu * REACH_LOG_TAIL))
    while log_bound(hi) > REACH_LOG_TAIL:
        lo, hi = hi, 2.0 * hi
    for _ in range(64):
        mid = 0.5 * (lo + hi)
        if log_bound(mid) > REACH_LOG_TAIL:
            lo = mid
        else:
            hi = mid
        if hi - lo < 0.5:
            break
    return max(40, int(math.ceil(hi)))


def log_skellam_pmf(js: np.ndarray, variance: float) -> np.ndarray:
    """log P(X = j) for X ~ Sk(``variance``): Debye's expansion from DEBYE_VARIANCE on, scipy's
    ive below (-inf where it underflows, nan where ive is out of its range)."""
    if variance >= DEBYE_VARIANCE:
        return log_skellam_pmf_large(js, variance)
    from scipy.special import ive  # start-up time, as in unit_shift_table

    with np.errstate(divide="ignore"):
        return np.log(ive(np.abs(np.asarray(js, dtype=float)), variance))  # e^-mu I_j(mu): the pmf at j and -j


def central_step(variance: float) -> float:
    """2 Z(0) = 2 Phi^-1(P(X <= 0)) for X ~ Sk(``variance``): the step of the unit shift at the
    centre, the largest one (docs/accounting.md §11.7: ``m1 sqrt(mu) - 1`` is about ``1 / (6 mu)``).

    By symmetry P(X <= 0) = (1 + P(X = 0)) / 2, so 2 Z(0) = 2 sqrt(2) erfinv(P(X = 0)), exact to
    the pmf's relative precision, which a tail summed from the far end is not at large variances
    (its rounding is absolute, and Z(0) is about P(X = 0) sqrt(pi / 2)). Where P(X = 0) > 1/2
    (mu below about 0.87) it is near 1 and its complement loses digits instead: there
    2 Z(0) = -2 ndtri(P(X > 0)), the tail summed from the far end as the table sums it.
    """
    from scipy.special import erfinv, ndtri

    log_p0 = float(log_skellam_pmf(np.zeros(1), variance)[0])
    if log_p0 <= -math.log(2.0):
        return 2.0 * math.sqrt(2.0) * float(erfinv(math.exp(log_p0)))
    log_pmf = log_skellam_pmf(np.arange(1, table_reach(variance) + 1, dtype=float), variance)
    tail = float(np.cumsum(np.exp(log_pmf[log_pmf > -np.inf])[::-1])[-1])  # P(0 < X <= reach)
    return -2.0 * float(ndtri(tail))


@functools.lru_cache(maxsize=64)
def unit_shift_table(variance: float) -> tuple[float, np.ndarray]:
    """m1 of Sk(``variance``) and log P(X > j) for j = 0 .. J (docs/accounting.md §11.7).

    With Z(j) = Phi^-1(P(X <= j)), the pair (Sk + 1, Sk) is dominated by (N(m, 1), N(0, 1))
    at every checked vertex iff every step Z(j) - Z(j-1) is <= m; by the Skellam's symmetry
    Z(-j-1) = -Z(j), so the steps are 2 Z(0) and Z(j) - Z(j-1) for j >= 1, mirrored. m1 is
    the largest step over j = 0 .. J, J the last j with P(X > j) >= e^TAIL_LOG_FLOOR,
    raised by DOMINATION_MARGIN. The pmf is tabulated up to :func:`table_reach` (one pass),
    its tails summed from the far end, Z = -ndtri(P(X > j)) (each tail keeps its relative
    precision down to 1e-150), Z(0) from P(X = 0) by symmetry. The returned array is read-only (cached).
    """
    # start-up time: scipy.special is imported where the table is first computed (as in
    # log_skellam_pmf), not when accounting.events is imported
    from scipy.special import ndtri

    reach = table_reach(variance)
    while True:
        log_pmf = log_skellam_pmf(np.arange(reach + 1, dtype=float), variance)
        if not np.all(log_pmf < np.inf):  # nan: ive out of its range (MAX_TABULATED_VARIANCE)
            raise ArithmeticError(f"the Skellam pmf at variance {variance:g} is not computable")
        underflow = ~(log_pmf > -np.inf)
        if underflow.any():
            # the pmf is below 1e-308 from here on: its mass beyond is a relative 1e-150 of
            # every tail kept (P(X > j) >= 1e-150), inside DOMINATION_MARGIN
            log_pmf = log_pmf[: int(np.argmax(underflow))]
        # P(j <= X <= reach), summed from the far end (smallest terms first); every term kept is
        # above 1e-308 or a subnormal far below the 1e-150 floor, so the sums keep their precision
        at_least = np.cumsum(np.exp(log_pmf)[::-1])[::-1]
        sf = at_least[1:]  # P(j < X <= reach), j = 0 .. reach - 1
        if underflow.any() or sf.size == 0 or sf[-1] < math.exp(TAIL_LOG_FLOOR):
            break
        reach *= 2  # not reached: table_reach's bound puts the pmf at the reach below the floor
    sf = sf[sf >= math.exp(TAIL_LOG_FLOOR)]
    if sf.size == 0:  # P(X > 0) below the floor: next to no noise, no vertex to dominate
        raise ArithmeticError(f"the Skellam variance {variance:g} is too small to tabulate")
    z = -ndtri(sf)  # Z(j) = Phi^-1(1 - P(X > j)), j = 0 .. J
    # The steps Z(j) - Z(j-1), j >= 1, difference two tails that share all but one term, so the
    # sums' rounding cancels; 2 Z(0) differences nothing, and is :func:`central_step` exactly,
    # where the far-end sum would carry its rounding (about 1e-9 of m1 at mu = 5e9)
    steps = np.concatenate(([central_step(variance)], np.diff(z)))
    log_sf = np.log(sf)
    log_sf.setflags(write=False)
    return float(np.max(steps)) * (1.0 + DOMINATION_MARGIN), log_sf


# gaussian_domination's answers: two floats each, where the tables they are read from hold up to
# millions (unit_shift_table keeps 64). A plan of many pools asks each pool's event three times
# (pld's _unrepresented, _phases and _pld_delta), after every pool's table was computed: the 64 last
# tables stayed, and a plan of 100 pools computed 282 tables for 94 variances (issue 26).
@functools.lru_cache(maxsize=4096)
def gaussian_domination(variance: float, l2_sensitivity: float, l1_sensitivity: float) -> tuple[float, float]:
    """(noise multiplier 1/m, eta): one unsampled round is dominated by (N(m,1), N(0,1)) up to eta.

    docs/accounting.md §11.7: a shift k in one coordinate has Z(j) - Z(j-k) <= k m1 (a sum
    of k steps) at every vertex whose k steps were checked; over the coordinates the pairs
    tensorise, so an integer shift r with ||r||_2 <= D2 is dominated at m = m1 D2, and the
    unchecked vertices' mass is at most P(X > J - K) per coordinate (K = floor(min(D1, D2)),
    the largest |r_i|), over at most floor(min(D1, D2^2)) non-zero coordinates.
    """
    m1, log_sf = unit_shift_table(variance)
    largest = int(math.floor(min(l1_sensitivity, l2_sensitivity)))
    last = log_sf.size - 1  # J
    index = last - largest  # P(X > J - K): beyond the vertices a shift of K has checked, either end
    if index < 0:  # a shift beyond the tabulated tail: no vertex of it is checked
        return 1.0 / (m1 * l2_sensitivity), 1.0
    nonzero = math.floor(min(l1_sensitivity, l2_sensitivity**2))
    return 1.0 / (m1 * l2_sensitivity), min(1.0, nonzero * math.exp(float(log_sf[index])))


class PoissonSampledSkellam(ApproximateDpEvent):
    """``steps`` rounds of the Poisson(``sampling_rate``)-subsampled distributed Skellam mechanism.

    ``variance`` is the per-coordinate Skellam variance the server cannot remove (the
    honest survivors' shares together); ``l2_sensitivity`` and ``l1_sensitivity`` bound
    one client's rounded integer vector. All three are in grid units.
    """

    kind: Literal["poisson_sampled_skellam"] = "poisson_sampled_skellam"
    sampling_rate: SamplingRate
    variance: _Positive
    l2_sensitivity: _Positive
    l1_sensitivity: _Positive
    steps: Steps

    @pydantic.model_validator(mode="after")
    def _l1_covers_l2(self) -> PoissonSampledSkellam:
        # Any vector's L1 norm is at least its L2 norm: a smaller L1 bound cannot hold.
        if self.l1_sensitivity < self.l2_sensitivity:
            raise ValueError("l1_sensitivity must be at least l2_sensitivity (an L1 norm is never below the L2 norm)")
        return self

    def rdp(self, grid: OrderGrid) -> np.ndarray:
        """steps * the subsampled Skellam RDP at every order, fractional ones at the next integer (§11.6)."""
        base = skellam_rdp_curve(top_order(grid.orders), self.variance, self.l2_sensitivity, self.l1_sensitivity)
        return self.steps * zhu_wang_rdp(grid.orders, self.sampling_rate, base)

    def dominating_gaussian(self) -> tuple[float, float] | None:
        """(noise multiplier, extra delta) of the Gaussian phase that dominates this event
        (docs/accounting.md §11.7): ``steps`` rounds at this sampling rate, delta raised by
        steps * eta. None above MAX_TABULATED_VARIANCE, or where a coordinate's shift reaches
        past the tabulated tail (eta = 1: the sensitivity dwarfs the noise)."""
        if self.variance > MAX_TABULATED_VARIANCE:
            return None
        try:
            sigma, eta = gaussian_domination(self.variance, self.l2_sensitivity, self.l1_sensitivity)
        except ArithmeticError:
            return None
        return None if eta >= 1.0 else (sigma, min(1.0, self.steps * eta))
