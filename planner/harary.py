"""SecAgg+ graph parameters: the Harary degree k and Shamir threshold t (Bell et al. 2020).

docs/secure-aggregation.md §SecAgg states the bound and its source. SecAgg+ (Bell, Bonawitz,
Gascón, Lepoint and Raykova, CCS 2020) replaces the complete graph of Bonawitz et al. by a
Harary graph H(n, k) whose n nodes sit on a ring in a random order, each joined to the
k/2 nearest on either side; a client's secrets are t-of-k Shamir-shared to its neighbours.
Against an honest-but-curious server that corrupts at most a fraction gamma of the
clients, with at most a fraction delta dropping out, (k, t) is good when, over the random
order of the ring,

1. (security, connectivity) the honest survivors stay connected:
   ``P_disc = [n (n - k - 1) / 2] * B! (n - k)! / (n! (B - k)!) < 2^-(sigma + 1)``,
   ``B = floor(gamma n) + floor(delta n)`` (removing a Harary graph's edges needs two runs
   of k/2 consecutive removed nodes; a union bound over the pairs of runs);
2. (security, shares) no client has t corrupt neighbours:
   ``P[Hyp(n, floor(gamma n), k) >= t] < 2^-(sigma + 1) / n``;
3. (correctness) every client keeps t surviving neighbours:
   ``P[Hyp(n, ceil((1 - delta) n), k) < t] < 2^-eta / n``;

with ``Hyp(N, K, k)`` the hypergeometric count of marked nodes among k drawn from N with K
marked. k is the smallest even degree below n - 1 for which some t satisfies 2 and 3 once
1 holds; t is the smallest such (at least 2). This is a port of the parameter finder of
Google's SecAgg+ implementation (``fcp/secagg/server/graph_parameter_finder.cc`` and
``distribution_utilities.cc`` in github.com/google-parfait/federated-compute,
``CURIOUS_SERVER`` class), whose defaults sigma = 40 and eta = 20 are ours too; its
published test values are checked in ``tests/planner/test_harary.py``.
Pure Python (``math.lgamma``): the trainer's secure aggregation imports it without scipy.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

from accounting.errors import InvalidInputError

SECURITY_BITS = 40.0  # sigma: P(a bad event that breaks privacy) < 2^-40
CORRECTNESS_BITS = 20.0  # eta: P(a client lacks t surviving neighbours) < 2^-20
# The reference implementation adds this before flooring rates times n, so that float
# rounding never moves a bound in the insecure direction.
_SMALL = 1e-14
# Google's finder refuses gamma + delta above 0.9 for an honest-but-curious server.
MAX_BAD_FRACTION = 0.9
# gamma: the fraction of clients the server may corrupt (collude with) that our SecAgg+ graphs assume.
DEFAULT_CORRUPT_FRACTION = 1 / 3


class HararyParameters(NamedTuple):
    """A Harary graph H(num_clients, neighbours) and the Shamir threshold of each share group."""

    num_clients: int
    neighbours: int  # k, even, < num_clients - 1
    share_threshold: int  # t, 2 <= t <= k


@lru_cache(maxsize=1024)
def harary_parameters(num_clients: int, corrupt_fraction: float, dropout_fraction: float) -> HararyParameters | None:
    """The smallest even k < n - 1 (and its t) meeting conditions 1-3, or None when none does.

    None means SecAgg+ needs (nearly) the complete graph: use full mode.
    (docs/secure-aggregation.md §SecAgg.)
    """
    _check(num_clients, corrupt_fraction, dropout_fraction)
    for neighbours in range(2, num_clients - 1, 2):
        threshold = _threshold_for(num_clients, neighbours, corrupt_fraction, dropout_fraction)
        if threshold is not None:
            return HararyParameters(num_clients, neighbours, threshold)
    return None


def share_threshold(num_clients: int, neighbours: int, corrupt_fraction: float, dropout_fraction: float) -> int | None:
    """The Shamir threshold t for a given even degree k (conditions 1-3), or None if k is too small."""
    _check(num_clients, corrupt_fraction, dropout_fraction)
    if neighbours < 2 or neighbours % 2 or neighbours >= num_clients - 1:
        raise InvalidInputError("neighbours", f"must be even, >= 2 and < num_clients - 1, got {neighbours}")
    return _threshold_for(num_clients, neighbours, corrupt_fraction, dropout_fraction)


def log_disconnection_bound(num_clients: int, neighbours: int, bad_clients: int) -> float:
    """log of the union bound on P(the ring's honest survivors are disconnected), condition 1.

    ``log(n (n - k - 1) / 2) + log(B! (n - k)! / (n! (B - k)!))``; minus infinity when k > B.
    """
    n, k = num_clients, neighbours
    if k > bad_clients:
        return -math.inf
    pairs = math.log(n) + math.log(n - k - 1) - math.log(2)
    return (
        pairs
        + math.lgamma(bad_clients + 1)
        + math.lgamma(n - k + 1)
        - math.lgamma(n + 1)
        - math.lgamma(bad_clients - k + 1)
    )


def _threshold_for(n: int, k: int, gamma: float, delta: float) -> int | None:
    bits_per_event = SECURITY_BITS + 1  # sigma is split evenly over the two bad events
    corrupt = math.floor((gamma + _SMALL) * n)
    dropped = math.floor((delta + _SMALL) * n)
    if log_disconnection_bound(n, k, corrupt + dropped) >= -bits_per_event * math.log(2):
        return None
    surviving = math.ceil((1 - delta - _SMALL) * n)
    # t1: the smallest t with P(corrupt neighbours > t1) <= 2^-(sigma+1) / n.
    t1 = _upper_quantile(n, corrupt, k, 2.0**-bits_per_event / n)
    # t2: the smallest x with P(surviving neighbours <= x) >= 2^-eta / n; any t in (t1, t2] works.
    t2 = _lower_quantile(n, surviving, k, 2.0**-CORRECTNESS_BITS / n) + 1
    if t2 <= t1:
        return None
    return max(t1 + 1, 2)


class _Hypergeometric:
    """Marked nodes among ``sampled`` drawn without replacement from ``total`` with ``marked`` marked."""

    def __init__(self, total: int, marked: int, sampled: int) -> None:
        if not 0 <= marked <= total or not 0 <= sampled <= total:
            raise ValueError(f"invalid hypergeometric ({total}, {marked}, {sampled})")
        self.total, self.marked, self.sampled = total, marked, sampled

    def pmf(self, x: int) -> float:
        N, K, k = self.total, self.marked, self.sampled
        if x < 0 or x > k or x > K or N + x < K + k:
            return 0.0
        return math.exp(
            math.lgamma(k + 1) + math.lgamma(K + 1) + math.lgamma(N - K + 1) + math.lgamma(N - k + 1)
            - math.lgamma(x + 1) - math.lgamma(k - x + 1) - math.lgamma(K - x + 1)
            - math.lgamma(N + 1) - math.lgamma(N - k - K + x + 1)
        )

    def cdf(self, x: int) -> float:
        """P(X <= x), summed downwards from x (the pmf recurrence) until the terms vanish."""
        total = 0.0
        term = self.pmf(x)
        N, K, k = self.total, self.marked, self.sampled
        while x >= 0 and term > total * 1e-16:
            total += term
            # pmf(x - 1) = pmf(x) x (N - K - k + x) / ((K - x + 1) (k - x + 1))
            term *= x * (N - K - k + x) / ((K - x + 1) * (k - x + 1)) if x > 0 else 0.0
            x -= 1
        return total


def _lower_quantile(total: int, marked: int, sampled: int, quantile: float) -> int:
    """The largest x with P(X <= x) < quantile (-1 if none), X ~ Hyp(total, marked, sampled).

    Starts below the answer (Hoeffding: P(X <= k (K/N - s)) <= exp(-2 k s^2) = quantile)
    and adds the pmf upwards, as the reference implementation does.
    """
    dist = _Hypergeometric(total, marked, sampled)
    start = math.floor(sampled * (marked / total - math.sqrt(-math.log(quantile) / (2 * sampled))))
    x = max(-1, marked + sampled - total - 1, start)
    cdf = dist.cdf(x) if x >= 0 else 0.0
    while cdf < quantile and x < sampled:
        x += 1
        cdf += dist.pmf(x)
    return x - 1


def _upper_quantile(total: int, marked: int, sampled: int, quantile: float) -> int:
    """The smallest t with P(X > t) < quantile, X ~ Hyp(total, marked, sampled).

    By symmetry ``X > t`` iff ``Y = sampled - X <= sampled - t - 1`` with Y counting the
    unmarked, so t = sampled - 1 - (the largest y with P(Y <= y) < quantile).
    """
    return sampled - 1 - _lower_quantile(total, total - marked, sampled, quantile)


def _check(num_clients: int, corrupt_fraction: float, dropout_fraction: float) -> None:
    if not isinstance(num_clients, int) or isinstance(num_clients, bool) or num_clients < 1:
        raise InvalidInputError("num_clients", f"must be a positive integer, got {num_clients!r}")
    for name, value in (("corrupt_fraction", corrupt_fraction), ("dropout_fraction", dropout_fraction)):
        if not 0 <= value < 1:
            raise InvalidInputError(name, f"must be in [0, 1), got {value!r}")
    if corrupt_fraction + dropout_fraction > MAX_BAD_FRACTION:
        raise InvalidInputError(
            "corrupt_fraction",
            f"corrupt_fraction + dropout_fraction = {corrupt_fraction + dropout_fraction:.3g} exceeds "
            f"{MAX_BAD_FRACTION}: no sparse graph can be shown secure and correct",
        )
