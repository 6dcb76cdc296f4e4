"""Secure aggregation per pool: the threshold m_P (docs/planning.md §6) and the graph (SecAgg+ or full).

In one round the survivors of pool P are ``S = sum_g Binomial(N_g, q_g (1 - dropout_rate))``
over its member groups. Each sampled client adds a noise share ``N(0, sigma_P^2 C^2 / m_P)``
and the pool's sum is unmasked only if ``S >= m_P``, so the released noise variance is
``S sigma_P^2 C^2 / m_P >= sigma_P^2 C^2``: the threshold never weakens privacy, it only
trades abort probability against noise inflation. ``m_P`` is the largest m with
``P(S < m) <= abort_probability``.

The distribution of S is computed exactly by convolving the members' binomial pmfs (each
restricted to a window outside which its mass is negligible; the neglected lower-tail mass
is added back to the CDF, so the reported abort probability is an upper bound), or by a
normal approximation with continuity correction when the support is too wide to convolve.

The graph (docs/secure-aggregation.md §SecAgg): ``secagg_graph`` decides, for a pool of n
participants, between the complete graph (full mode) and SecAgg+'s Harary graph with
Bell et al.'s neighbour count k and share threshold t (``planner.harary``) for the
corrupt fraction gamma and the pool's dropout bound delta; ``auto`` takes SecAgg+ when
each share group is at most 1/SPARSE_MIN_SAVING of the pool and n >= SPARSE_MIN_CLIENTS.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, NamedTuple, get_args

import numpy as np

from accounting.errors import InvalidInputError
from planner.harary import DEFAULT_CORRUPT_FRACTION, harary_parameters
from planner.schema import RequestedSecagg, SecaggMode

if TYPE_CHECKING:
    from planner.schema import PoolPlan

# Start-up time: scipy.special (about 0.2 s of a process's start, its array-API layer) is
# imported where a threshold is first computed, not with this module: the service, the
# trainer and `gdpfed plan verify` import the planner's secure aggregation (its graph, its
# checks) without asking for a binomial (issue 26 §2).


@functools.cache
def _boost() -> SimpleNamespace | None:
    """The Boost binomial functions scipy.stats.binom itself calls (scipy >= 1.12 keeps them in
    scipy.special): importing scipy.stats for them cost every `gdpfed plan` about a third of
    its start-up (issue 26 §2; docs/architecture.md, "Command line"). None on an older scipy
    (then scipy.stats serves, ``_stats``)."""
    try:
        from scipy.special._ufuncs import _binom_cdf, _binom_isf, _binom_pmf, _binom_ppf, _binom_sf
    except ImportError:  # pragma: no cover - older scipy: the public distribution
        return None
    return SimpleNamespace(pmf=_binom_pmf, cdf=_binom_cdf, sf=_binom_sf, ppf=_binom_ppf, isf=_binom_isf)


class _Binom:
    """``scipy.stats.binom``'s pmf, cdf, sf, ppf and isf, value for value, without importing
    scipy.stats: the same Boost functions behind the same handling of the support's ends
    and of invalid parameters (scipy.stats ``rv_discrete``; tests/planner/test_secagg.py
    compares both on random and edge arguments)."""

    @staticmethod
    def _args(x: object, n: object, p: object) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        x_a, n_a, p_a = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (x, n, p)))
        valid = (n_a >= 0) & (n_a == np.round(n_a)) & (p_a >= 0) & (p_a <= 1)
        return x_a, n_a, p_a, valid

    @staticmethod
    def _out(values: np.ndarray) -> Any:
        return values[()] if values.ndim == 0 else values

    @classmethod
    def pmf(cls, k: object, n: object, p: object) -> Any:
        k_a, n_a, p_a, valid = cls._args(k, n, p)
        cond = valid & (k_a >= 0) & (k_a <= n_a) & (np.floor(k_a) == k_a)
        out = np.where(~valid | np.isnan(k_a), np.nan, 0.0)
        out[cond] = np.clip(_ufuncs().pmf(k_a[cond], n_a[cond], p_a[cond]), 0, 1)
        return cls._out(out)

    @classmethod
    def cdf(cls, k: object, n: object, p: object) -> Any:
        k_a, n_a, p_a, valid = cls._args(k, n, p)
        cond = valid & (k_a >= 0) & (k_a < n_a) & np.isfinite(k_a)
        out = np.where(k_a >= n_a, 1.0, 0.0)
        out[~valid | np.isnan(k_a)] = np.nan
        out[cond] = np.clip(_ufuncs().cdf(np.floor(k_a[cond]), n_a[cond], p_a[cond]), 0, 1)
        return cls._out(out)

    @classmethod
    def sf(cls, k: object, n: object, p: object) -> Any:
        k_a, n_a, p_a, valid = cls._args(k, n, p)
        cond = valid & (k_a >= 0) & (k_a < n_a) & np.isfinite(k_a)
        out = np.where(~valid | np.isnan(k_a), np.nan, 0.0)
        out[((k_a < 0) | np.isneginf(k_a)) & valid] = 1.0
        out[cond] = np.clip(_ufuncs().sf(np.floor(k_a[cond]), n_a[cond], p_a[cond]), 0, 1)
        return cls._out(out)

    @classmethod
    def _quantile(cls, q: object, n: object, p: object, fn: Any, at_zero: str) -> Any:
        q_a, n_a, p_a, valid = cls._args(q, n, p)
        out = np.full(q_a.shape, np.nan)
        low, high = (q_a == 0) & valid, (q_a == 1) & valid
        out[low] = -1.0 if at_zero == "below" else n_a[low]
        out[high] = n_a[high] if at_zero == "below" else -1.0
        cond = valid & (q_a > 0) & (q_a < 1)
        out[cond] = fn(q_a[cond], n_a[cond], p_a[cond])
        return cls._out(out)

    @classmethod
    def ppf(cls, q: object, n: object, p: object) -> Any:
        return cls._quantile(q, n, p, _ufuncs().ppf, "below")

    @classmethod
    def isf(cls, q: object, n: object, p: object) -> Any:
        return cls._quantile(q, n, p, _ufuncs().isf, "above")


def _ufuncs() -> SimpleNamespace:
    """:func:`_boost`'s functions, which ``_Binom`` calls (docs/architecture.md, "Command line")."""
    boost = _boost()
    assert boost is not None  # _Binom serves only where _boost found them (_stats)
    return boost


class _Norm:
    """``scipy.stats.norm``'s cdf and ppf for real arguments: ndtr and ndtri, which it calls."""

    @staticmethod
    def cdf(x: Any) -> Any:
        from scipy.special import ndtr  # start-up time (above)

        return ndtr(x)

    @staticmethod
    def ppf(x: Any) -> Any:
        from scipy.special import ndtri  # start-up time (above)

        return ndtri(x)


class _Stats:
    binom: Any = _Binom
    norm: Any = _Norm


@functools.cache
def _stats() -> Any:
    """scipy.stats' binom and norm as this module calls them: the Boost functions and ndtr,
    ndtri (``_Binom``, ``_Norm``), or scipy.stats itself on a scipy without them, imported on
    first use (docs/architecture.md, "Command line")."""
    if _boost() is None:  # pragma: no cover - older scipy
        from scipy import stats

        return stats
    return _Stats()


# Convolve exactly while the total support of S has at most this many points.
EXACT_SUPPORT_LIMIT = 2_000_000
# Each member's window leaves out at most this fraction of abort_probability (summed).
_TAIL_FRACTION = 1e-6


class SecaggThreshold(NamedTuple):
    threshold: int  # m_P >= 1
    abort_probability: float  # P(S < m_P), an upper bound when exact
    expected_survivors: float  # E[S]
    exact: bool  # True: convolution of binomials; False: normal approximation
    meets_target: bool  # False only when even m = 1 aborts more often than asked


def survivor_distribution(
    num_clients: Sequence[int], survival_rates: Sequence[float], tail_mass: float = 1e-15
) -> tuple[int, np.ndarray, float]:
    """The pmf of ``S = sum_g Binomial(N_g, r_g)`` on a window: (offset, pmf, left_out_below).

    ``pmf[i] = P(S = offset + i)`` up to the mass left out of each member's window;
    ``left_out_below`` is the total mass each member has below its window (an upper bound
    on how much of ``P(S < x)`` the window misses). docs/planning.md §6.
    """
    offset = 0
    pmf = np.ones(1)
    left_out = 0.0
    members = [(int(n), float(r)) for n, r in zip(num_clients, survival_rates) if n > 0 and r > 0]
    per_member = tail_mass / max(1, len(members))
    for n, rate in members:
        if rate >= 1.0:
            offset += n
            continue
        low = int(_stats().binom.ppf(per_member, n, rate))
        high = int(_stats().binom.isf(per_member, n, rate)) + 1
        low = max(0, low - 1)
        high = min(n, high)
        support = np.arange(low, high + 1)
        member_pmf = _stats().binom.pmf(support, n, rate)
        left_out += float(_stats().binom.cdf(low - 1, n, rate)) if low > 0 else 0.0
        pmf = _convolve(pmf, member_pmf)
        offset += low
    return offset, pmf, left_out


def secagg_threshold(
    num_clients: Sequence[int],
    sampling_rates: Sequence[float],
    dropout_rate: float,
    abort_probability: float,
    *,
    method: str = "auto",
) -> SecaggThreshold:
    """m_P = the largest m with P(S < m) <= abort_probability (docs/planning.md §6).

    ``method``: ``exact`` (convolution), ``normal`` (continuity-corrected normal
    approximation) or ``auto`` (exact while the support has at most
    ``EXACT_SUPPORT_LIMIT`` points). If even m = 1 aborts more often than asked
    (P(S = 0) > abort_probability), the result is m = 1 with ``meets_target`` False.
    """
    rates = [float(q) * (1.0 - float(dropout_rate)) for q in sampling_rates]
    counts = [int(n) for n in num_clients]
    mean = float(sum(n * r for n, r in zip(counts, rates)))
    variance = float(sum(n * r * (1.0 - r) for n, r in zip(counts, rates)))
    if method not in ("auto", "exact", "normal"):
        raise ValueError(f"unknown method {method!r}")
    if method == "auto":
        width = sum(min(n, 40.0 * math.sqrt(n * r * (1 - r)) + 40.0) for n, r in zip(counts, rates))
        method = "exact" if width <= EXACT_SUPPORT_LIMIT else "normal"
    if method == "exact":
        return _exact_threshold(counts, rates, abort_probability, mean)
    return _normal_threshold(mean, variance, abort_probability)


def single_group_thresholds(
    num_clients: np.ndarray, sampling_rates: np.ndarray, dropout_rate: float, abort_probability: float
) -> list[SecaggThreshold]:
    """Exact thresholds for many one-group pools at once (S ~ Binomial(N, q (1 - dropout))).

    Same definition as :func:`secagg_threshold`: m = 1 + the largest k with
    P(S <= k) <= abort_probability (m = 1, ``meets_target`` False, if P(S = 0) is already
    larger). Vectorised with the binomial quantile function; docs/planning.md §6.
    """
    n = np.asarray(num_clients, dtype=float)
    r = np.asarray(sampling_rates, dtype=float) * (1.0 - float(dropout_rate))
    alpha = float(abort_probability)
    k = _stats().binom.ppf(alpha, n, r)  # smallest k with P(S <= k) >= alpha
    k = np.where(_stats().binom.cdf(k, n, r) <= alpha, k, k - 1)  # largest k with P(S <= k) <= alpha
    below = np.where(k >= 0, _stats().binom.cdf(k, n, r), 0.0)
    p_zero = _stats().binom.pmf(0, n, r)
    out = []
    for i in range(len(n)):
        if k[i] < 0:
            out.append(SecaggThreshold(1, float(p_zero[i]), float(n[i] * r[i]), True, bool(p_zero[i] <= alpha)))
        else:
            out.append(SecaggThreshold(int(k[i]) + 1, float(below[i]), float(n[i] * r[i]), True, True))
    return out


def pool_thresholds(
    pools: Sequence[tuple[np.ndarray, np.ndarray]], dropout_rate: float, abort_probability: float
) -> list[SecaggThreshold | None]:
    """Each pool's threshold from its members' ``(num_clients, sampling_rates)``; ``None`` for a
    pool that expects no client (docs/planning.md §6).

    One-group pools (most of them with many groups) are answered in one batch
    (:func:`single_group_thresholds`), the others by :func:`secagg_threshold`. The plan
    (``planner.finalize``) and the population-scaled designs of ``planner.learnability``
    (docs/planning.md §13) both read their thresholds here.
    """
    singles = [p for p, (n, q) in enumerate(pools) if len(n) == 1 and q[0] > 0]
    batch = single_group_thresholds(
        np.array([pools[p][0][0] for p in singles], dtype=float),
        np.array([pools[p][1][0] for p in singles], dtype=float),
        dropout_rate,
        abort_probability,
    ) if singles else []
    batched = dict(zip(singles, batch))
    out: list[SecaggThreshold | None] = []
    for p, (n, q) in enumerate(pools):
        if p in batched:
            out.append(batched[p])
        elif float(np.dot(n, q)) > 0:
            out.append(secagg_threshold(np.asarray(n).tolist(), np.asarray(q).tolist(), dropout_rate, abort_probability))
        else:
            out.append(None)
    return out


def _exact_threshold(counts: list[int], rates: list[float], alpha: float, mean: float) -> SecaggThreshold:
    offset, pmf, left_out = survivor_distribution(counts, rates, tail_mass=alpha * _TAIL_FRACTION)
    # cdf_below[i] = P(S < offset + i) (upper bound: the neglected lower tails are added).
    cdf_below = np.concatenate([[0.0], np.cumsum(pmf)]) + left_out
    cdf_below = np.minimum(cdf_below, 1.0)
    # P(S < m) for m <= offset is at most left_out; for m = offset + i it is cdf_below[i].
    ok = np.nonzero(cdf_below <= alpha)[0]
    if ok.size == 0:
        m = 1
        p_abort = _exact_below(1, offset, cdf_below, left_out)
        return SecaggThreshold(1, p_abort, mean, True, False)
    # cdf_below is non-decreasing, so the feasible set is a prefix; take its last index.
    m = offset + int(ok[-1])
    if m < 1:
        p_abort = _exact_below(1, offset, cdf_below, left_out)
        return SecaggThreshold(1, p_abort, mean, True, p_abort <= alpha)
    return SecaggThreshold(m, float(cdf_below[m - offset]), mean, True, True)


def _exact_below(m: int, offset: int, cdf_below: np.ndarray, left_out: float) -> float:
    """P(S < m) from the windowed CDF (left_out bounds it below the window)."""
    index = m - offset
    if index <= 0:
        return min(1.0, left_out)
    if index >= len(cdf_below):
        return 1.0
    return float(cdf_below[index])


def _normal_threshold(mean: float, variance: float, alpha: float) -> SecaggThreshold:
    """Continuity-corrected normal: P(S < m) ~ Phi((m - 0.5 - mean) / sd)."""
    if variance <= 0:
        m = max(1, int(round(mean)))
        return SecaggThreshold(m, 0.0 if mean >= m else 1.0, mean, False, mean >= 1)
    sd = math.sqrt(variance)
    m = math.floor(mean + 0.5 + sd * float(_stats().norm.ppf(alpha)))
    # Guard against the floor landing one above the boundary through rounding.
    while m >= 1 and _stats().norm.cdf((m - 0.5 - mean) / sd) > alpha:
        m -= 1
    if m < 1:
        p = float(_stats().norm.cdf((0.5 - mean) / sd))
        return SecaggThreshold(1, p, mean, False, p <= alpha)
    return SecaggThreshold(m, float(_stats().norm.cdf((m - 0.5 - mean) / sd)), mean, False, True)


def _convolve(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    if min(len(left), len(right)) > 20_000:
        # scipy.signal only here: it adds ~40 modules to every gdpfed plan's start-up, and
        # only pools with very wide survivor supports convolve by FFT (issue 26 §3)
        from scipy import signal

        out = signal.fftconvolve(left, right)
        # FFT round-off (~1e-16 of the peak) only matters for abort probabilities far
        # below any practical target; clip the tiny negatives it leaves.
        return np.maximum(out, 0.0)
    return np.convolve(left, right)


# auto: SecAgg+ only where it cuts each client's pairwise work at least this many times...
SPARSE_MIN_SAVING = 4
# ...and for pools of at least this many participants (smaller ones run full mode in
# well under a second at d ~ 5e4; docs/benchmarks.md §Issue 17: rounds at 300 and 1,000 clients).
SPARSE_MIN_CLIENTS = 100


class SecaggGraph(NamedTuple):
    """A pool session's graph: full (complete) or sparse (Harary H(n, k), t-of-k share groups)."""

    mode: SecaggMode
    num_clients: int  # n, the participants the parameters are computed for
    neighbours: int | None  # k (sparse only)
    share_threshold: int | None  # t of each share group (sparse only)
    corrupt_fraction: float  # gamma
    dropout_fraction: float  # delta


def dropout_bound(num_clients: int, dropout_rate: float, abort_probability: float) -> float:
    """delta = D / n, D the smallest count with P(Binomial(n, dropout_rate) > D) <= abort_probability.

    The dropout fraction SecAgg+'s parameters must tolerate: a round exceeds it with
    probability at most the scenario's per-round abort probability (docs/secure-aggregation.md §SecAgg).
    """
    if num_clients < 1 or dropout_rate <= 0:
        return 0.0
    dropped = int(_stats().binom.isf(abort_probability, num_clients, dropout_rate))
    # isf's integer answer may sit one below the boundary; step until the tail is small enough.
    while dropped < num_clients and _stats().binom.sf(dropped, num_clients, dropout_rate) > abort_probability:
        dropped += 1
    return dropped / num_clients


def secagg_graph(
    num_clients: int,
    dropout_rate: float,
    abort_probability: float,
    requested: RequestedSecagg = "auto",
    corrupt_fraction: float = DEFAULT_CORRUPT_FRACTION,
) -> SecaggGraph:
    """The graph of a pool session of ``num_clients`` participants (docs/secure-aggregation.md §SecAgg).

    ``sparse`` uses Bell et al.'s (k, t) for (gamma, delta), delta = ``dropout_bound``,
    and falls back to full mode when no k < n - 1 meets the bounds (the complete graph is
    then the only secure choice) or gamma + delta is infeasible; ``auto`` is sparse only
    when n >= SPARSE_MIN_CLIENTS and k + 1 <= n / SPARSE_MIN_SAVING; ``full`` is full.
    """
    return graph_and_reason(num_clients, dropout_rate, abort_probability, requested, corrupt_fraction)[0]


def graph_and_reason(
    num_clients: int,
    dropout_rate: float,
    abort_probability: float,
    requested: RequestedSecagg = "auto",
    corrupt_fraction: float = DEFAULT_CORRUPT_FRACTION,
) -> tuple[SecaggGraph, str | None]:
    """``secagg_graph``'s graph, and why it is full where SecAgg+ was asked for or weighed:
    no Harary graph meets the bounds, gamma + delta leaves none, or (``auto``) SecAgg+'s
    k would save less than ``SPARSE_MIN_SAVING`` times the pairwise work. ``None`` for a
    sparse graph, ``full`` as asked, and ``auto`` below ``SPARSE_MIN_CLIENTS`` (full is
    the rule there, not a rejection). For the console only: plans store no reason."""
    if requested not in get_args(RequestedSecagg):
        raise InvalidInputError("secagg", f"must be full, sparse or auto, got {requested!r}")
    delta = dropout_bound(num_clients, dropout_rate, abort_probability)
    full = SecaggGraph("full", num_clients, None, None, corrupt_fraction, delta)
    if requested == "full":
        return full, None
    try:
        found = harary_parameters(num_clients, corrupt_fraction, delta)
    except InvalidInputError:  # gamma + delta too large for any sparse graph
        return full, f"gamma + delta = {corrupt_fraction + delta:.3g} leaves no SecAgg+ graph"
    if found is None:
        return full, f"no SecAgg+ graph with k < n - 1 meets the bounds at n={num_clients}, delta={delta:.3g}"
    if requested == "auto":
        if num_clients < SPARSE_MIN_CLIENTS:
            return full, None
        if SPARSE_MIN_SAVING * (found.neighbours + 1) > num_clients:
            return full, f"SecAgg+ k={found.neighbours} saves < {SPARSE_MIN_SAVING}x"
    return SecaggGraph("sparse", num_clients, found.neighbours, found.share_threshold, corrupt_fraction, delta), None


def graph_label(mode: str | None, neighbours: int | None, share_threshold: int | None) -> str:
    """``full``, ``sparse k=32 t=31`` or ``-`` (no graph stated): a graph in logs, tables and summaries."""
    if mode == "sparse":
        return f"sparse k={neighbours} t={share_threshold}"
    return mode or "-"


def planned_participants(expected_clients: float) -> int:
    """The pool size the plan states its graph for: E[participants] rounded (at least 1)."""
    return max(1, int(round(expected_clients)))


def check_stated_graph(pool: PoolPlan, dropout_rate: float, abort_probability: float) -> None:
    """Refuse a pool whose stated graph is not the one ``secagg_graph`` derives for it.

    Plans written before the fields existed state none (null) and pass; the trainer
    always derives its graphs itself and never uses the stated values.
    """
    if pool.secagg_mode is None:
        return
    derived = secagg_graph(planned_participants(pool.expected_clients), dropout_rate, abort_probability)
    for name, value in zip(STATED_GRAPH_FIELDS, derived):
        if getattr(pool, name) != value:  # the first field that differs, as the plan names it
            raise InvalidInputError(
                f"pools.{pool.id}.{name}",
                f"states {getattr(pool, name)!r}, but the pool's participants and bounds give {value!r}: "
                "the document is inconsistent",
            )


# A pool's stated graph, field by field in SecaggGraph's order.
STATED_GRAPH_FIELDS = (
    "secagg_mode", "secagg_participants", "secagg_neighbours", "secagg_share_threshold", "secagg_corrupt_fraction",
    "secagg_dropout_fraction",
)
