"""Renyi DP of the Poisson-subsampled Gaussian mechanism, vectorised over orders and terms.

The maths is derived in docs/accounting.md §2 (RDP of the sampled Gaussian: the exact
binomial sum for integer orders, the two-series expansion for fractional orders and its
tail bound), §3 (conversion to (epsilon, delta)) and §4 (composition of phases).

Everything here is a pure function of its arguments. Orders are a fixed grid
(:func:`default_orders`, the grid of Google's dp-accounting); a curve is an array of RDP
values on that grid. Arrays are float64 throughout; ``inf`` marks an order whose series did
not converge, which only removes that order from the minimum (conservative).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from accounting.special import gammaln, log_ndtr

# Fractional-order series (docs/accounting.md §2.2): terms are summed in chunks of
# _CHUNK for every order still running; an order stops when its remaining terms are
# bounded analytically, or (like dp-accounting) when both series decrease and the last
# terms are below exp(-30) of the running total. After _MAX_TERMS terms an order that has
# done neither is dropped (its value becomes inf), exactly as dp-accounting drops it.
_CHUNKS = (16, 16, 32, 64, 128, 256, 512)  # first chunks small: most orders finish in one
_MAX_TERMS = sum(_CHUNKS)
_NEGLIGIBLE_LOG = 30.0
# windowed_epsilons evaluates the integer orders >= _LARGE_ORDER_START (128 ... 1024 on the
# default grid, half of all binomial terms) only for points whose best smaller integer
# order is >= _LARGE_ORDER_TRIGGER, i.e. near the top of the smaller ones.
_LARGE_ORDER_START = 64
_LARGE_ORDER_TRIGGER = 48
# log A_alpha below this is recomputed from A - 1 (docs/accounting.md §2.4): the plain log
# of a sum near 1 has an absolute error of a few 1e-16, a relative error of more than
# 1e-12 below here and all of it once A - 1 < 1e-16 (tiny q). Above it the old sums are
# kept bit for bit.
SMALL_LOG_A = 1e-4


def default_orders() -> np.ndarray:
    """1.1, 1.2, ..., 10.9, 11, ..., 63, 128, 256, 512, 1024 (dp-accounting's grid)."""
    fractional = np.round(1.0 + np.arange(1, 100) / 10.0, 10)
    return np.concatenate([fractional, np.arange(11, 64), [128, 256, 512, 1024]]).astype(float)


class OrderGrid(NamedTuple):
    """The order grid split the way the evaluators need it (built by :func:`order_grid`)."""

    orders: np.ndarray  # all orders, shape (n,)
    integer_index: np.ndarray  # positions of integer orders in ``orders``
    fractional_index: np.ndarray  # positions of non-integer orders
    # Flattened binomial sums for the integer orders: term t belongs to integer order
    # ``term_order[t]`` (a position in integer_index) and has summation index ``term_i[t]``.
    term_order: np.ndarray
    term_i: np.ndarray
    term_alpha: np.ndarray
    term_log_binom: np.ndarray
    term_quad: np.ndarray  # (i^2 - i) / 2
    segment_starts: np.ndarray


def order_grid(orders: Sequence[float] | np.ndarray | None = None) -> OrderGrid:
    """Precompute the sigma- and q-independent parts of the integer-order sums.

    The default grid is built once per process and shared (its arrays are read-only):
    verifying a 1,000-group plan asked for it once per group, 0.3 s of rebuilding the
    same 2,000 binomial terms (docs/benchmarks.md "Issue 26: plan and start-up speed").
    """
    if orders is None:
        return _default_grid()
    return _build_grid(np.asarray(orders, dtype=float))


@functools.cache
def _default_grid() -> OrderGrid:
    grid = _build_grid(default_orders())
    for array in grid:
        array.setflags(write=False)  # shared by every caller: nobody may write into it
    return grid


def _build_grid(grid: np.ndarray) -> OrderGrid:
    if grid.ndim != 1 or grid.size == 0 or np.any(grid <= 1) or not np.all(np.isfinite(grid)):
        raise ValueError("orders must be a non-empty list of finite numbers > 1")
    is_integer = grid == np.round(grid)
    integer_index = np.flatnonzero(is_integer)
    fractional_index = np.flatnonzero(~is_integer)
    alphas = grid[integer_index].astype(np.int64)
    counts = alphas + 1
    starts = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    term_order = np.repeat(np.arange(alphas.size), counts)
    index = np.arange(int(counts.sum())) - np.repeat(starts, counts)
    term_alpha_int = alphas[term_order]
    term_i = index.astype(float)
    term_alpha = term_alpha_int.astype(float)
    # log C(alpha, i) from one table of log k! (one gammaln per distinct k, not per term)
    log_factorial = gammaln(np.arange(int(alphas.max(initial=0)) + 1) + 1.0)
    term_log_binom = log_factorial[term_alpha_int] - log_factorial[index] - log_factorial[term_alpha_int - index]
    return OrderGrid(
        orders=grid,
        integer_index=integer_index,
        fractional_index=fractional_index,
        term_order=term_order,
        term_i=term_i,
        term_alpha=term_alpha,
        term_log_binom=term_log_binom,
        term_quad=(term_i * term_i - term_i) / 2.0,
        segment_starts=starts,
    )


def log_a_integer(
    grid: OrderGrid,
    sampling_rates: np.ndarray,
    noise_multipliers: np.ndarray,
    orders: slice = slice(None),
) -> np.ndarray:
    """log A_alpha for integer orders of ``grid`` and every point (docs/accounting.md §2.1).

    A_alpha = sum_{i=0}^{alpha} C(alpha, i) q^i (1-q)^(alpha-i) exp((i^2 - i) / (2 sigma^2)),
    summed exactly in log space (one logsumexp per (point, order) segment). Points are the
    broadcast of ``sampling_rates`` and ``noise_multipliers`` (1-D, q < 1); ``orders`` is a
    slice of the grid's integer orders (their terms are contiguous). Returns an array of
    shape (points, orders in the slice).
    """
    q = np.atleast_1d(np.asarray(sampling_rates, dtype=float))
    sigma = np.atleast_1d(np.asarray(noise_multipliers, dtype=float))
    q, sigma = np.broadcast_arrays(q, sigma)
    first, stop, _ = orders.indices(grid.segment_starts.size)
    n_all = grid.term_i.size
    term_first = int(grid.segment_starts[first]) if first < grid.segment_starts.size else n_all
    term_stop = int(grid.segment_starts[stop]) if stop < grid.segment_starts.size else n_all
    terms = slice(term_first, term_stop)
    term_i = grid.term_i[terms]
    # Extreme points give inf/nan here on purpose: sigma^2 overflows to inf (1/sigma^2 = 0,
    # the limit) and a calibration's probe at q = 0 or sigma = 0 gives nan, which its caller
    # refuses (nan <= target is false), so numpy's warnings would only be noise on stderr.
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_q = np.log(q)[:, None]
        log_1mq = np.log1p(-q)[:, None]
        base = grid.term_log_binom[terms] + term_i * log_q + (grid.term_alpha[terms] - term_i) * log_1mq
        quad = grid.term_quad[terms] * (1.0 / (sigma * sigma))[:, None]
    values = base + quad
    starts = grid.segment_starts[first:stop] - term_first
    log_a = _segment_logsumexp(values, starts)
    rows = np.flatnonzero(np.any(log_a < SMALL_LOG_A, axis=1))
    if rows.size:
        # A - 1 = sum_{i>=2} C(alpha,i) q^i (1-q)^(alpha-i) (e^{(i^2-i)/(2 sigma^2)} - 1):
        # subtracting sum_i C(alpha,i) q^i (1-q)^(alpha-i) = 1 leaves positive terms only
        # (the i = 0, 1 terms vanish), so A - 1 is summed to full relative precision
        # (docs/accounting.md §2.4).
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            x = quad[rows]
            log_expm1 = np.where(x > 0, x + np.log(-np.expm1(-x)), -np.inf)  # log(e^x - 1), no overflow
            log_a_minus_1 = _segment_logsumexp(base[rows] + log_expm1, starts)
            refined = np.log1p(np.exp(log_a_minus_1))
        refined = np.where(np.isnan(refined), log_a[rows], refined)
        log_a[rows] = np.where(log_a[rows] < SMALL_LOG_A, refined, log_a[rows])
    return log_a


def _segment_logsumexp(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """logsumexp over the column segments [starts[k], starts[k+1]) of each row."""
    points, n_terms = values.shape
    if starts.size == 0:
        return np.zeros((points, 0))
    flat = values.reshape(-1)
    flat_starts = (starts[None, :] + n_terms * np.arange(points)[:, None]).reshape(-1)
    peak = np.maximum.reduceat(flat, flat_starts)
    counts = np.diff(np.append(flat_starts, flat.size))
    shifted = np.exp(flat - np.repeat(peak, counts))
    return (peak + np.log(np.add.reduceat(shifted, flat_starts))).reshape(points, starts.size)


def log_a_fractional(
    sampling_rates: np.ndarray | float, noise_multipliers: np.ndarray | float, alphas: np.ndarray
) -> np.ndarray:
    """log A_alpha for non-integer orders, one (q, sigma, alpha) per entry (docs/accounting.md §2.2).

    A_alpha = A0 + A1, the two integrals of (mu1/mu0)^alpha dmu0 split at
    z0 = sigma^2 log(1/q - 1) + 1/2, each expanded as a binomial series:
      s0_i = |C(alpha,i)| q^i (1-q)^(alpha-i) e^{(i^2-i)/(2 sigma^2)} Phi((z0 - i)/sigma)
      s1_i = |C(alpha,i)| q^j (1-q)^i e^{(j^2-j)/(2 sigma^2)} Phi((j - z0)/sigma),  j = alpha - i.
    Absolute values of the coefficients make the sum an upper bound (as dp-accounting
    does). Terms are summed in chunks for all unfinished entries at once; an entry stops
    when the rest of its series is bounded analytically (the tail bound of docs/accounting.md §2.2,
    added to the sum) or when its terms are negligible (< e^-30 of the total and
    decreasing). An entry that does neither within ``_MAX_TERMS`` terms returns inf.
    """
    q, sigma, alpha = (np.atleast_1d(np.asarray(v, dtype=float)) for v in (sampling_rates, noise_multipliers, alphas))
    zero = np.zeros(np.broadcast(q, sigma, alpha).shape)
    q, sigma, alpha = q + zero, sigma + zero, alpha + zero  # broadcast copies
    result = np.full(q.size, np.inf)
    if q.size == 0:
        return result
    # The log-gammas depend on the order alone: computed once per distinct order (a few of
    # them, however many points) and gathered, the same values (accounting/special.py's
    # port, what a `gdpfed account` question runs, costs per value what scipy costs per call).
    distinct, order_of = np.unique(alpha, return_inverse=True)
    lgamma_alpha = gammaln(distinct + 1)[order_of]
    # As in log_a_integer, extreme points give inf/nan on purpose (z0^2 overflows to inf for
    # a huge sigma: the tail constant is then -inf, the tail's limit), without the warnings.
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_q = np.log(q)
        log_1mq = np.log1p(-q)
        z0 = sigma * sigma * (log_1mq - log_q) + 0.5
        inv_two_var = 0.5 / (sigma * sigma)
        # Tail constant (docs/accounting.md §2.2): every tail term is at most
        # |C(alpha,i)| (1-q)^alpha exp(-z0^2/(2 sigma^2)) sigma / sqrt(2 pi) / (distance to z0).
        log_tail_const = alpha * log_1mq - z0 * z0 * inv_two_var + np.log(sigma) - 0.5 * math.log(2 * math.pi)
    # Per-entry columns, gathered for the entries still running at each chunk.
    columns = np.array([alpha, sigma, log_q, log_1mq, z0, inv_two_var, lgamma_alpha, log_tail_const])

    active = np.arange(q.size)
    acc = np.full(q.size, -np.inf)
    start = 0
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        for chunk in _CHUNKS:
            i = np.arange(start, start + chunk, dtype=float)
            start += chunk
            cols = columns if active.size == q.size else columns[:, active]
            a, s, lq, l1q, z, itv, lga, ltc = cols[:, :, None]
            # Both series side by side: s0 in the first ``chunk`` columns (power i of q,
            # j = alpha - i of 1 - q), s1 in the last (the powers swapped).
            j = a - i
            lgamma_j = gammaln(distinct[:, None] - i + 1)[order_of[active]]  # gammaln(j + 1), j = alpha - i
            log_binom = lga - gammaln(i + 1) - lgamma_j
            p_q = np.empty((j.shape[0], 2 * chunk))
            p_q[:, :chunk] = i
            p_q[:, chunk:] = j
            normal_arg = (z - p_q) / s
            normal_arg[:, chunk:] *= -1.0  # s1's argument is (j - z0) / sigma
            terms = (
                np.concatenate([log_binom, log_binom], axis=1)
                + p_q * lq
                + (a - p_q) * l1q  # the power of 1 - q: alpha - (the power of q)
                + (p_q * p_q - p_q) * itv
                + log_ndtr(normal_arg)
            )
            acc_active = np.logaddexp(acc[active], _row_logsumexp(terms))
            acc[active] = acc_active

            n = float(start)  # index of the first term not summed
            a1, zz = a[:, 0], z[:, 0]
            gap0 = n - zz
            gap1 = n + zz - a1
            tail_ok = (n > a1 + 1.0) & (gap0 >= 1.0) & (gap1 >= 1.0)
            log_b_n = lga[:, 0] - math.lgamma(n + 1) - gammaln(distinct - n + 1)[order_of[active]]
            log_tail = (
                ltc[:, 0]
                + log_b_n
                + np.log1p((n + 1) / a1)
                + np.log(1.0 / np.where(tail_ok, gap0, 1.0) + 1.0 / np.where(tail_ok, gap1, 1.0))
            )
            last0, before0 = terms[:, chunk - 1], terms[:, chunk - 2]
            last1, before1 = terms[:, -1], terms[:, -2]
            negligible = (
                (last0 < before0) & (last1 < before1) & (np.maximum(last0, last1) < acc_active - _NEGLIGIBLE_LOG)
            )
            finite = np.isfinite(acc_active)
            done_tail = tail_ok & finite
            done_negligible = negligible & ~done_tail & finite
            result[active[done_tail]] = np.logaddexp(acc_active[done_tail], log_tail[done_tail])
            result[active[done_negligible]] = acc_active[done_negligible]
            active = active[~(done_tail | done_negligible)]
            if active.size == 0:
                break
    return result


def _row_logsumexp(values: np.ndarray) -> np.ndarray:
    """logsumexp along axis 1 (scipy's is an order of magnitude slower on small arrays).
    The caller ignores divide-by-zero (log 0 = -inf for an all -inf row).

    Where the sum is within SMALL_LOG_A of its largest term, log(sum) = log1p(the other
    terms' sum) instead: log of a sum near 1 would lose the small terms (docs/accounting.md §2.4).
    """
    peak = np.max(values, axis=1)
    safe = np.where(np.isfinite(peak), peak, 0.0)
    shifted = np.exp(values - safe[:, None])
    total = np.sum(shifted, axis=1)
    result = safe + np.log(total)
    near = np.flatnonzero(np.isfinite(peak) & (total < 1.0 + SMALL_LOG_A))
    if near.size:
        rest = shifted[near]
        rest[np.arange(near.size), np.argmax(values[near], axis=1)] = 0.0  # the peak term, exactly 1
        log_rest = np.log1p(np.sum(rest, axis=1))
        # peak (about -alpha q) and log_rest nearly cancel: add a bound on their rounding,
        # 16 ulps of the larger, so the result stays an upper bound (docs/accounting.md §2.4)
        allowance = 16.0 * np.finfo(float).eps * np.maximum(np.abs(safe[near]), log_rest)
        result[near] = safe[near] + log_rest + allowance
    return result


def rdp_curve(sampling_rate: float, noise_multiplier: float, grid: OrderGrid | None = None) -> np.ndarray:
    """RDP of ONE step of the sampled Gaussian at every order of the grid (docs/accounting.md §2).

    q = 1 is the plain Gaussian, alpha / (2 sigma^2). Otherwise log A_alpha / (alpha - 1).
    """
    grid = order_grid() if grid is None else grid
    orders = grid.orders
    if sampling_rate >= 1.0:
        return orders / (2.0 * noise_multiplier**2)
    curve = np.empty(orders.size)
    log_a = log_a_integer(grid, np.array([sampling_rate]), np.array([noise_multiplier]))[0]
    curve[grid.integer_index] = log_a / (orders[grid.integer_index] - 1.0)
    frac = orders[grid.fractional_index]
    if frac.size:
        curve[grid.fractional_index] = log_a_fractional(sampling_rate, noise_multiplier, frac) / (frac - 1.0)
    return np.maximum(curve, 0.0)  # RDP is >= 0; rounding near 0 must not lower it


def rdp_curves(
    sampling_rates: np.ndarray, noise_multipliers: np.ndarray, grid: OrderGrid | None = None
) -> np.ndarray:
    """:func:`rdp_curve` of many (q, sigma) points at once, one row per point (docs/accounting.md §2).

    Row k is ``rdp_curve(sampling_rates[k], noise_multipliers[k], grid)`` bit for bit: the
    same element-wise operations, batched (the integer orders' binomial sums and the
    fractional orders' series of all points in one call each), so verifying every group
    of a plan costs two vectorised calls instead of two per group.
    """
    grid = order_grid() if grid is None else grid
    q = np.asarray(sampling_rates, dtype=float).reshape(-1)
    sigma = np.asarray(noise_multipliers, dtype=float).reshape(-1)
    orders = grid.orders
    curves = np.empty((q.size, orders.size))
    full = q >= 1.0
    for k in np.flatnonzero(full):
        curves[k] = orders / (2.0 * float(sigma[k]) ** 2)
    every = np.flatnonzero(~full)
    frac = orders[grid.fractional_index]
    # blocks of points: the series' work arrays of a block stay in the CPU caches (one
    # block of 1,000 points took 1.3-1.5x as long as blocks of 64); rows are independent
    for first in range(0, every.size, _CURVES_BLOCK):
        sub = every[first:first + _CURVES_BLOCK]
        part = np.empty((sub.size, orders.size))
        log_a = log_a_integer(grid, q[sub], sigma[sub])
        part[:, grid.integer_index] = log_a / (orders[grid.integer_index] - 1.0)
        if frac.size:
            log_a_frac = log_a_fractional(
                np.repeat(q[sub], frac.size), np.repeat(sigma[sub], frac.size), np.tile(frac, sub.size)
            )
            part[:, grid.fractional_index] = log_a_frac.reshape(sub.size, frac.size) / (frac - 1.0)
        curves[sub] = np.maximum(part, 0.0)
    return curves


_CURVES_BLOCK = 64


def rdp_of_phases(
    phases: Sequence[tuple[float, float, int]], grid: OrderGrid | None = None
) -> np.ndarray:
    """Composition of phases (q, sigma, steps): the sum of steps * curve (docs/accounting.md §4)."""
    grid = order_grid() if grid is None else grid
    total = np.zeros(grid.orders.size)
    for sampling_rate, noise_multiplier, steps in phases:
        total = total + steps * rdp_curve(sampling_rate, noise_multiplier, grid)
    return total


def conversion_epsilons(orders: np.ndarray, rdp: np.ndarray, delta: float) -> np.ndarray:
    """Per-order epsilon of an RDP curve at ``delta`` (docs/accounting.md §3), broadcast over rows.

    eps(alpha) = R(alpha) + log(1 - 1/alpha) - (log delta + log alpha) / (alpha - 1)
    (Balle et al. 2020 / Canonne, Kamath, Steinke 2020), or 0 where the KL bound
    delta >= sqrt(1 - exp(-R)) already holds; inf where R is inf.
    """
    orders = np.asarray(orders, dtype=float)
    rdp = np.asarray(rdp, dtype=float)
    with np.errstate(invalid="ignore", over="ignore"):
        eps = rdp + np.log1p(-1.0 / orders) - (math.log(delta) + np.log(orders)) / (orders - 1.0)
        kl_enough = delta * delta + np.expm1(-rdp) > 0
    eps = np.where(kl_enough, 0.0, eps)
    return np.where(np.isnan(eps) | np.isinf(rdp), np.inf, eps)


def epsilon_from_rdp(orders: np.ndarray, rdp: np.ndarray, delta: float) -> tuple[float, float]:
    """(epsilon, optimal order): the minimum over orders of :func:`conversion_epsilons`."""
    eps = conversion_epsilons(orders, rdp, delta)
    index = int(np.argmin(eps))
    return max(0.0, float(eps[index])), float(np.asarray(orders)[index])


def single_point_epsilons(
    grid: OrderGrid,
    sampling_rate: float,
    steps: float,
    delta: float,
    spent_rdp: np.ndarray | None = None,
) -> tuple[Callable[[float], float], Callable[[float], float]]:
    """(windowed, model): two functions of sigma for ONE (q, T), with the per-call
    constants (the q-dependent parts of the binomial terms of §2.1, the conversion
    constants of §3, the spent curve) computed once here (docs/accounting.md §7.1).

    ``windowed(sigma)`` is ``windowed_epsilons(grid, [q], [sigma], steps, delta,
    spent_rdp)[0]``: the same orders, the same floating-point operations in the same
    order, hence the same value, without the per-call array set-up. ``model(sigma)`` is
    the epsilon on the integer orders below 64 only: one segmented logsumexp. It is an
    upper bound too (a subset of orders) but calibration uses it only to place
    evaluations of ``windowed``, never as a proof.
    """
    orders = grid.orders
    int_orders = orders[grid.integer_index]
    frac_orders = orders[grid.fractional_index]
    n_small = int(np.searchsorted(int_orders, _LARGE_ORDER_START))
    spent = np.zeros(orders.size) if spent_rdp is None else np.asarray(spent_rdp, dtype=float).reshape(-1)
    spent_int, spent_frac = spent[grid.integer_index], spent[grid.fractional_index]
    with np.errstate(divide="ignore"):
        # conversion_epsilons computes rdp + log1p(-1/alpha) - (log delta + log alpha)/(alpha - 1)
        shift = np.log1p(-1.0 / orders)
        penalty = (math.log(delta) + np.log(orders)) / (orders - 1.0)
    shift_int, penalty_int = shift[grid.integer_index], penalty[grid.integer_index]
    shift_frac, penalty_frac = shift[grid.fractional_index], penalty[grid.fractional_index]
    delta_sq = delta * delta
    full_q = sampling_rate >= 1.0
    frac_min = frac_orders.min() if frac_orders.size else math.inf

    def convert(total: np.ndarray, shift_part: np.ndarray, penalty_part: np.ndarray) -> np.ndarray:
        # conversion_epsilons, operation for operation
        with np.errstate(invalid="ignore", over="ignore"):
            eps = total + shift_part - penalty_part
            kl_enough = delta_sq + np.expm1(-total) > 0
        eps = np.where(kl_enough, 0.0, eps)
        return np.where(np.isnan(eps) | np.isinf(total), np.inf, eps)

    stop = int(grid.segment_starts[n_small]) if n_small < grid.segment_starts.size else grid.term_i.size
    starts = grid.segment_starts[:n_small]
    counts = np.diff(np.append(starts, stop))
    quad = grid.term_quad[:stop]
    alpha_small = int_orders[:n_small]
    if not full_q:
        # log_a_integer's sum (lb + i log q) + (alpha - i) log(1-q), then + quad / sigma^2
        term_i = grid.term_i[:stop]
        base = (
            grid.term_log_binom[:stop]
            + term_i * np.log(np.array([sampling_rate]))
            + (grid.term_alpha[:stop] - term_i) * np.log1p(-np.array([sampling_rate]))
        )

    def small_integer_rdp(sigma: float) -> np.ndarray:
        if full_q:
            return alpha_small / (2.0 * sigma**2)
        values = base + quad * (1.0 / (sigma * sigma))
        if n_small == 0:
            return np.zeros(0)
        peak = np.maximum.reduceat(values, starts)
        shifted = np.exp(values - np.repeat(peak, counts))
        log_a = peak + np.log(np.add.reduceat(shifted, starts))
        if np.any(log_a < SMALL_LOG_A):
            # log_a_integer recomputes these from A - 1 (docs/accounting.md §2.4); its other
            # entries are these same operations, so windowed stays equal to windowed_epsilons
            log_a = log_a_integer(grid, np.array([sampling_rate]), np.array([sigma]), slice(0, n_small))[0]
        return log_a / (alpha_small - 1.0)

    def small_integer_eps(sigma: float) -> np.ndarray:
        total = np.maximum(small_integer_rdp(sigma), 0.0) * steps + spent_int[:n_small]
        return convert(total, shift_int[:n_small], penalty_int[:n_small])

    def model(sigma: float) -> float:
        eps = small_integer_eps(sigma)
        return max(0.0, float(np.min(eps))) if eps.size else math.inf

    def windowed(sigma: float) -> float:
        int_eps = small_integer_eps(sigma)
        if n_small < int_orders.size and int_eps.size and int_orders[np.argmin(int_eps)] >= _LARGE_ORDER_TRIGGER:
            block = slice(n_small, int_orders.size)
            alpha = int_orders[block]
            if full_q:
                rdp_values = alpha / (2.0 * sigma**2)
            else:
                log_a = log_a_integer(grid, np.array([sampling_rate]), np.array([sigma]), block)[0]
                rdp_values = log_a / (alpha - 1.0)
            total = np.maximum(rdp_values, 0.0) * steps + spent_int[block]
            int_eps = np.concatenate([int_eps, convert(total, shift_int[block], penalty_int[block])])
        best_int = float(np.min(int_eps)) if int_eps.size else math.inf
        if frac_orders.size == 0:
            return max(best_int, 0.0)
        best_order = int_orders[np.argmin(int_eps)] if int_eps.size else int_orders[0]
        window = ((frac_orders > best_order - 1.0) & (frac_orders < best_order + 1.0)) | (frac_orders == frac_min)
        alpha = frac_orders[window]
        if full_q:
            rdp_values = alpha / (2.0 * sigma**2)
        else:
            log_a = log_a_fractional(np.full(alpha.size, sampling_rate), np.full(alpha.size, sigma), alpha)
            rdp_values = log_a / (alpha - 1.0)
        total = np.maximum(rdp_values, 0.0) * steps + spent_frac[window]
        frac_eps = convert(total, shift_frac[window], penalty_frac[window])
        return max(min(best_int, float(np.min(frac_eps))), 0.0)

    return windowed, model


def windowed_epsilons(
    grid: OrderGrid,
    sampling_rates: np.ndarray,
    noise_multipliers: np.ndarray,
    steps: np.ndarray | float,
    delta: float,
    spent_rdp: np.ndarray | None = None,
) -> np.ndarray:
    """Fast epsilon of (spent + steps x one step) for many points, on a SUBSET of orders.

    Used inside calibration loops (docs/accounting.md §7.1): the integer orders up to 63; the larger
    integer orders only where the best of those is at least ``_LARGE_ORDER_TRIGGER``;
    then only the fractional orders strictly between the integer neighbours of the best
    integer order, plus the smallest order (which decides the KL shortcut). A subset of orders can only raise the minimum, so the result is >=
    the full-grid epsilon of :func:`epsilon_from_rdp`: a sigma that meets a target here
    meets it on the full grid too. (The conversion objective is unimodal in the order in
    practice, so the subset almost always contains the full-grid optimum; the tests
    compare both.) Shapes: 1-D arrays broadcast together; ``spent_rdp`` is one curve on
    ``grid`` or one row per point.
    """
    q, sigma, t = (
        np.array(v)
        for v in np.broadcast_arrays(
            np.atleast_1d(np.asarray(sampling_rates, dtype=float)),
            np.atleast_1d(np.asarray(noise_multipliers, dtype=float)),
            np.atleast_1d(np.asarray(steps, dtype=float)),
        )
    )
    points = q.size
    orders = grid.orders
    spent = np.zeros((1, orders.size)) if spent_rdp is None else np.atleast_2d(spent_rdp)
    per_point_spent = spent.shape[0] > 1
    full_q = q >= 1.0
    q_safe = np.where(full_q, 0.5, q)

    int_orders = orders[grid.integer_index]
    n_small = int(np.searchsorted(int_orders, _LARGE_ORDER_START))
    int_eps = np.full((points, int_orders.size), np.inf)

    def integer_block(rows: np.ndarray, block: slice) -> None:
        alpha = int_orders[block]
        log_a = log_a_integer(grid, q_safe[rows], sigma[rows], block)
        rdp_values = np.where(full_q[rows, None], alpha / (2.0 * sigma[rows, None] ** 2), log_a / (alpha - 1.0))
        spent_rows = spent[rows] if per_point_spent else spent
        total = np.maximum(rdp_values, 0.0) * t[rows, None] + spent_rows[:, grid.integer_index[block]]
        int_eps[rows, block] = conversion_epsilons(alpha, total, delta)

    everyone = np.arange(points)
    integer_block(everyone, slice(0, n_small))
    if n_small < int_orders.size:
        best_small = int_orders[np.argmin(int_eps[:, :n_small], axis=1)]
        rows = np.flatnonzero(best_small >= _LARGE_ORDER_TRIGGER)
        if rows.size:
            integer_block(rows, slice(n_small, int_orders.size))
    best_int = np.min(int_eps, axis=1)

    frac_orders = orders[grid.fractional_index]
    if frac_orders.size == 0:
        return np.maximum(best_int, 0.0)
    best_order = int_orders[np.argmin(int_eps, axis=1)]
    window = (frac_orders[None, :] > best_order[:, None] - 1.0) & (frac_orders[None, :] < best_order[:, None] + 1.0)
    # The smallest order has the smallest RDP value, so it alone decides the KL shortcut
    # (epsilon = 0 when delta^2 >= 1 - exp(-R)); always include it.
    window |= frac_orders[None, :] == frac_orders.min()
    rows, cols = np.nonzero(window)
    frac_eps = np.full((points, frac_orders.size), np.inf)
    if rows.size:
        alpha = frac_orders[cols]
        log_a = log_a_fractional(q_safe[rows], sigma[rows], alpha)
        rdp_values = np.where(full_q[rows], alpha / (2.0 * sigma[rows] ** 2), log_a / (alpha - 1.0))
        spent_rows = spent[rows if per_point_spent else np.zeros_like(rows), grid.fractional_index[cols]]
        total = np.maximum(rdp_values, 0.0) * t[rows] + spent_rows
        frac_eps[rows, cols] = conversion_epsilons(alpha, total, delta)
    return np.maximum(np.minimum(best_int, np.min(frac_eps, axis=1)), 0.0)
