"""SecAgg+ graph parameters (docs/secure-aggregation.md §SecAgg): Bell et al.'s bounds and the mode rule."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from accounting.errors import InvalidInputError
from planner.harary import CORRECTNESS_BITS, SECURITY_BITS, harary_parameters, log_disconnection_bound, share_threshold
from planner.secagg import (
    DEFAULT_CORRUPT_FRACTION,
    SPARSE_MIN_CLIENTS,
    SPARSE_MIN_SAVING,
    dropout_bound,
    secagg_graph,
)

# (n, gamma, delta) -> (k, largest acceptable t): the published test values of the reference
# implementation, fcp/secagg/server/graph_parameter_finder_test.cc (google-parfait/federated-compute),
# CURIOUS_SERVER class, security 40, correctness 20. Its test checks k exactly and t <= the value.
REFERENCE = [
    (100, 0.45, 0.45, 92, 46),
    (1000, 0.45, 0.45, 822, 417),
    (10, 0.33, 0.33, 8, 4),
    (100, 0.33, 0.33, 68, 34),
    (1000, 0.33, 0.33, 286, 150),
    (10000, 0.33, 0.33, 422, 221),
    (100000, 0.33, 0.33, 480, 251),
    (10, 0.05, 0.33, 4, 2),
    (100, 0.05, 0.33, 28, 6),
    (1000, 0.05, 0.33, 72, 24),
    (100000, 0.05, 0.33, 96, 32),
    (10, 0.33, 0.05, 4, 4),
    (100, 0.33, 0.05, 34, 29),
    (1000, 0.33, 0.05, 78, 60),
    (100000, 0.33, 0.05, 102, 77),
]


@pytest.mark.parametrize("n, gamma, delta, k, t", REFERENCE)
def test_matches_the_reference_implementation(n: int, gamma: float, delta: float, k: int, t: int) -> None:
    found = harary_parameters(n, gamma, delta)
    assert found is not None
    assert found.neighbours == k
    assert 2 <= found.share_threshold <= t


def _conditions_hold(n: int, k: int, t: int, gamma: float, delta: float) -> bool:
    """Conditions 1-3 of docs/secure-aggregation.md §SecAgg, with scipy's hypergeometric."""
    corrupt = math.floor((gamma + 1e-14) * n)
    dropped = math.floor((delta + 1e-14) * n)
    surviving = math.ceil((1 - delta - 1e-14) * n)
    per_event = 2.0 ** -(SECURITY_BITS + 1)
    connected = log_disconnection_bound(n, k, corrupt + dropped) < math.log(per_event)
    secure = stats.hypergeom.sf(t - 1, n, corrupt, k) < per_event / n
    correct = stats.hypergeom.cdf(t - 1, n, surviving, k) < 2.0**-CORRECTNESS_BITS / n
    return bool(connected and secure and correct)


@pytest.mark.parametrize("n, gamma, delta", [(60, 1 / 3, 0.0), (263, 1 / 3, 0.0), (300, 0.2, 0.1), (800, 0.1, 0.3)])
def test_parameters_meet_the_bounds_and_k_is_the_smallest(n: int, gamma: float, delta: float) -> None:
    found = harary_parameters(n, gamma, delta)
    assert found is not None and found.neighbours % 2 == 0
    k, t = found.neighbours, found.share_threshold
    assert _conditions_hold(n, k, t, gamma, delta)
    assert not _conditions_hold(n, k, t - 1, gamma, delta) or t == 2  # t is the smallest secure one
    for smaller in range(2, k, 2):  # no smaller even degree has any valid threshold
        assert not any(_conditions_hold(n, smaller, u, gamma, delta) for u in range(2, smaller + 1))
    assert share_threshold(n, k, gamma, delta) == t


def test_disconnection_needs_more_bad_clients_than_the_degree() -> None:
    assert log_disconnection_bound(100, 10, 9) == -math.inf
    assert log_disconnection_bound(100, 10, 10) > -math.inf
    # More bad clients make disconnection likelier; a larger degree makes it rarer.
    assert log_disconnection_bound(100, 10, 40) > log_disconnection_bound(100, 10, 20)
    assert log_disconnection_bound(100, 20, 40) < log_disconnection_bound(100, 10, 40)


def test_small_or_hostile_pools_get_no_sparse_graph() -> None:
    assert harary_parameters(3, 1 / 3, 0.0) is None
    with pytest.raises(InvalidInputError, match="corrupt_fraction"):
        harary_parameters(100, 0.6, 0.4)
    with pytest.raises(InvalidInputError, match="dropout_fraction"):
        harary_parameters(100, 0.1, 1.0)


def test_dropout_bound_is_the_abort_probability_quantile() -> None:
    assert dropout_bound(300, 0.0, 0.01) == 0.0
    delta = dropout_bound(300, 0.1, 0.01)
    dropped = round(delta * 300)
    assert stats.binom.sf(dropped, 300, 0.1) <= 0.01 < stats.binom.sf(dropped - 1, 300, 0.1)


def test_auto_takes_sparse_only_where_it_pays() -> None:
    small = secagg_graph(SPARSE_MIN_CLIENTS - 1, 0.0, 0.01)
    assert small.mode == "full" and small.neighbours is None
    large = secagg_graph(1000, 0.0, 0.01)
    assert large.mode == "sparse" and large.corrupt_fraction == DEFAULT_CORRUPT_FRACTION
    assert large.neighbours is not None
    assert SPARSE_MIN_SAVING * (large.neighbours + 1) <= 1000
    found = harary_parameters(1000, DEFAULT_CORRUPT_FRACTION, 0.0)
    assert found is not None and (large.neighbours, large.share_threshold) == tuple(found)[1:]
    # Forced modes: full always; sparse whenever a Harary graph exists, even if it barely pays.
    assert secagg_graph(1000, 0.0, 0.01, "full").mode == "full"
    forced = secagg_graph(40, 0.0, 0.01, "sparse")
    assert forced.mode == "sparse" and forced.neighbours is not None and forced.neighbours < 39
    assert secagg_graph(3, 0.0, 0.01, "sparse").mode == "full"
    # A dropout rate raises delta and with it k.
    raised = secagg_graph(1000, 0.2, 0.01).neighbours
    assert raised is not None and raised > large.neighbours


def test_a_full_graph_says_why_sparse_was_not_taken() -> None:
    """graph_and_reason: the console's reason for full mode (docs/secure-aggregation.md §Automatic mode)."""
    from planner.secagg import graph_and_reason

    # auto at n = 280, dropout 0.05: Bell et al.'s k = 70, and 4 (k + 1) = 284 > 280
    graph, reason = graph_and_reason(280, 0.05, 0.01)
    assert graph == secagg_graph(280, 0.05, 0.01) and graph.mode == "full"
    assert reason == "SecAgg+ k=70 saves < 4x"
    assert graph_and_reason(280, 0.05, 0.01, "sparse") == (secagg_graph(280, 0.05, 0.01, "sparse"), None)
    # no Harary graph: sparse falls back to full, and says so
    graph, reason = graph_and_reason(3, 0.0, 0.01, "sparse")
    assert graph.mode == "full" and reason is not None and "no SecAgg+ graph" in reason and "n=3" in reason
    graph, reason = graph_and_reason(200, 0.6, 0.01, "sparse")
    assert graph.mode == "full" and reason is not None
    # full by the rule, asked for, or sparse: nothing to explain
    assert graph_and_reason(SPARSE_MIN_CLIENTS - 1, 0.0, 0.01)[1] is None
    assert graph_and_reason(1000, 0.0, 0.01, "full")[1] is None
    assert graph_and_reason(1000, 0.0, 0.01) == (secagg_graph(1000, 0.0, 0.01), None)
