"""Top-k keeps exactly k = ceil(kappa d) largest-magnitude coordinates; fixed denominator K."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.trainer.trainer_plans import hand_plan
from trainer.strategies import RoundContext
from trainer.units.client.sparsify import keep_count, top_k
from trainer.units.client.strategies import PlanStrategy


@settings(max_examples=60, deadline=None)
@given(
    dim=st.integers(1, 400),
    keep_ratio=st.floats(0.001, 1.0),
    seed=st.integers(0, 2**31 - 1),
)
def test_top_k_keeps_exactly_the_k_largest_magnitudes(dim, keep_ratio, seed):
    values = torch.from_numpy(np.random.default_rng(seed).standard_normal(dim))
    kept = top_k(values, keep_ratio)
    k = keep_count(dim, keep_ratio)
    assert k == min(dim, max(1, math.ceil(round(keep_ratio * dim, 9))))
    nonzero = kept != 0
    assert int(nonzero.sum()) == k
    # Kept coordinates are unchanged, and none dropped is larger than any kept.
    assert torch.equal(kept[nonzero], values[nonzero])
    if k < dim:
        assert values[~nonzero].abs().max() <= values[nonzero].abs().min()


def test_keep_count_respects_decimal_ratios():
    assert keep_count(100, 0.07) == 7
    assert keep_count(10, 0.1) == 1
    assert keep_count(10, 0.11) == 2
    assert keep_count(5, 1.0) == 5
    assert keep_count(1000, 1e-6) == 1
    with pytest.raises(ValueError):
        keep_count(10, 0.0)


def test_aggregate_sums_sparsified_pools_over_fixed_denominator():
    plan = hand_plan(
        [("a", 1.0, 10, 0.5), ("b", 2.0, 10, 0.5), ("c", 4.0, 10, 0.5)],
        [("pa", ["a"], 1.0, 1, 0.5), ("pb", ["b"], 1.0, 1, 1.0), ("pc", ["c"], 1.0, 1, 0.25)],
        expected_clients=12.0,
    )
    strategy = PlanStrategy(plan, None, None, engine="loop", local=None, device=torch.device("cpu"))
    sa = torch.tensor([4.0, -3.0, 2.0, 1.0], dtype=torch.float64)
    sb = torch.tensor([1.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    out = strategy.aggregate(RoundContext(0, 0, 0), {"pa": sa, "pb": sb, "pc": None}, 4)
    expected = (torch.tensor([4.0, -3.0, 0.0, 0.0]) + sb) / 12.0
    torch.testing.assert_close(out, expected.double())
    # The denominator stays K even when pools abort or fewer clients came.
    empty = strategy.aggregate(RoundContext(0, 0, 0), {"pa": None, "pb": None, "pc": None}, 4)
    assert torch.equal(empty, torch.zeros(4, dtype=torch.float64))


def test_server_momentum_and_lr():
    plan = hand_plan([("a", 1.0, 10, 0.5)], [("pa", ["a"], 1.0, 1, 1.0)])
    strategy = PlanStrategy(
        plan, None, None, engine="loop", local=None, device=torch.device("cpu"), server_lr=0.5, server_momentum=0.9
    )
    ctx = RoundContext(0, 0, 0)
    w = torch.zeros(2)
    w = strategy.server_update(ctx, w, torch.tensor([1.0, 0.0], dtype=torch.float64))
    w = strategy.server_update(ctx, w, torch.tensor([1.0, 0.0], dtype=torch.float64))
    # v1 = 1, v2 = 0.9 + 1 = 1.9; w = 0.5 * (1 + 1.9)
    torch.testing.assert_close(w, torch.tensor([1.45, 0.0]))
    state = strategy.state_dict()
    fresh = PlanStrategy(
        plan, None, None, engine="loop", local=None, device=torch.device("cpu"), server_lr=0.5, server_momentum=0.9
    )
    fresh.load_state_dict(state)
    assert torch.equal(fresh._momentum, strategy._momentum)
