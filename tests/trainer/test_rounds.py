"""The round engine's privacy mechanism through the real secure aggregation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from accounting.errors import InvalidInputError
from tests.trainer.trainer_plans import hand_plan
from trainer.strategies import Population, RoundContext
from trainer.units.client.mechanism import pool_mechanisms
from trainer.units.client.rounds import RoundEngine
from trainer.units.client.strategies import PlanStrategy


class FixedUpdates(PlanStrategy):
    """PlanStrategy whose clients all send the same update (zeros by default)."""

    def __init__(self, plan, dim, update=None):
        super().__init__(plan, None, None, engine="loop", local=None, device=torch.device("cpu"))
        self.dim = dim
        self.update = torch.zeros(dim) if update is None else update

    def client_update(self, ctx, global_params, clients, groups):
        return self.update.repeat(len(clients), 1)


def population_of(plan):
    start = 0
    groups = {}
    for group in plan.groups:
        groups[group.id] = np.arange(start, start + group.num_clients)
        start += group.num_clients
    return Population(groups)


def make_engine(plan, dim, update=None, **options):
    strategy = FixedUpdates(plan, dim, update)
    return RoundEngine(plan, strategy, population_of(plan), dim, rounds=plan.rounds, keep_pool_sums=True, **options)


def variance_interval(dim, variance, level=0.999):
    lo = stats.chi2.ppf((1 - level) / 2, dim - 1) / (dim - 1)
    hi = stats.chi2.ppf(1 - (1 - level) / 2, dim - 1) / (dim - 1)
    return variance * lo, variance * hi


@pytest.mark.parametrize(("execution", "graph"), [("protocol", "auto"), ("protocol", "sparse"), ("exact_sum", "auto")])
def test_zero_updates_release_pool_noise_of_sigma2_c2_n_over_m(execution, graph):
    dim = 4000
    # Three pools of different thresholds and sizes, one with a larger clip norm.
    plan = hand_plan(
        [("a", 1.0, 40, 0.5), ("b", 2.0, 30, 0.6), ("c", 4.0, 60, 0.3)],
        [("pa", ["a"], 2.0, 8, 1.0), ("pb", ["b"], 1.0, 12, 1.0), ("pc", ["c"], 0.5, 5, 1.0)],
        clip_norm=1.5,
        model_dim=dim,
        rounds=3,
    )
    engine = make_engine(plan, dim, secagg_execution=execution, secagg_mode=graph)
    checked = 0
    for round_index in range(3):
        _, outcome = engine.run(RoundContext(round_index, round_index, seed=11), torch.zeros(dim))
        for pool in plan.pools:
            released = outcome.pool_sums[pool.id]
            assert released is not None
            n = outcome.survived[pool.id]
            assert n == outcome.sampled[pool.groups[0]] >= pool.secagg_threshold
            expected = pool.noise_multiplier**2 * 1.5**2 * n / pool.secagg_threshold
            lo, hi = variance_interval(dim, expected)
            sample = float(np.var(released, ddof=1))
            assert lo <= sample <= hi, (pool.id, n, sample, expected)
            # Never below sigma^2 C^2, and the bug (dividing by the whole population's
            # expected count K) would give expected * m / K: far outside the interval.
            assert sample >= (pool.noise_multiplier * 1.5) ** 2 * 0.9
            buggy = pool.noise_multiplier**2 * 1.5**2 * n / plan.scenario.participation
            assert not lo <= buggy <= hi
            assert outcome.secagg[pool.id].startswith("sparse" if graph == "sparse" else "full")
            checked += 1
    assert checked == 9


def test_nonprivate_and_opted_out_pools_add_no_noise():
    dim = 50
    update = torch.linspace(-0.01, 0.01, dim)
    plan = hand_plan(
        [("a", 1.0, 20, 0.5), ("out", None, 10, 0.8)],
        [("pa", ["a"], 1.0, 3, 1.0), ("pout", ["out"], 0.0, 2, 1.0)],
        model_dim=dim,
    )
    engine = make_engine(plan, dim, update)
    _, outcome = engine.run(RoundContext(0, 0, seed=3), torch.zeros(dim))
    released = outcome.pool_sums["pout"]
    n = outcome.survived["pout"]
    assert n >= 2
    # Only fixed-point rounding (at most one grid step per client and coordinate).
    step = 1 / engine.mechanisms[1].scale
    error = np.abs(released - n * update.double().numpy())
    assert error.max() <= n * step
    assert step < 1e-4


def test_pool_with_fewer_than_threshold_clients_aborts_and_adds_nothing():
    dim = 20
    plan = hand_plan(
        [("a", 1.0, 10, 0.2), ("b", 2.0, 50, 0.5)],
        [("pa", ["a"], 1.0, 9, 1.0), ("pb", ["b"], 1.0, 5, 1.0)],
        model_dim=dim,
    )
    update = torch.full((dim,), 0.01)
    engine = make_engine(plan, dim, update)
    params, outcome = engine.run(RoundContext(0, 0, seed=5), torch.zeros(dim))
    assert outcome.aborted_pools == ["pa"]
    assert outcome.pool_sums["pa"] is None
    assert "threshold" in outcome.abort_reasons["pa"]
    expected = torch.from_numpy(outcome.pool_sums["pb"]).float() / plan.scenario.participation
    torch.testing.assert_close(params, expected)


def test_dropouts_after_masking_are_recovered_and_before_masking_excluded():
    dim = 30
    plan = hand_plan(
        [("a", None, 60, 0.8)],
        [("pa", ["a"], 0.0, 5, 1.0)],
        model_dim=dim,
        dropout_rate=0.4,
        method="nonprivate",
    )
    update = torch.full((dim,), 0.01)
    engine = make_engine(plan, dim, update, late_dropout_fraction=0.5)
    _, outcome = engine.run(RoundContext(0, 0, seed=9), torch.zeros(dim))
    assert outcome.dropped_before_masking > 0 and outcome.dropped_after_masking > 0
    n = outcome.survived["pa"]
    # Late dropouts' inputs are in the sum; early ones are not.
    assert n == outcome.sampled["a"] - outcome.dropped_before_masking
    step = 1 / engine.mechanisms[0].scale
    assert np.abs(outcome.pool_sums["pa"] - 0.01 * n).max() <= n * step


def test_encoded_contributions_never_exceed_clip_norm():
    dim = 300
    plan = hand_plan(
        [("a", 1.0, 30, 0.7), ("b", 3.0, 30, 0.7)],
        [("pa", ["a"], 1.0, 5, 1.0), ("pb", ["b"], 0.3, 5, 1.0)],
        model_dim=dim,
        clip_norms={"a": 0.5, "b": 2.0},
    )

    class RandomUpdates(FixedUpdates):
        def client_update(self, ctx, global_params, clients, groups):
            generator = torch.Generator().manual_seed(ctx.global_round)
            scales = torch.rand(len(clients), 1, generator=generator) * 10
            return torch.randn(len(clients), dim, generator=generator) * scales

    seen = []

    def hook(client, group_id, pre_noise):
        seen.append((group_id, float(np.linalg.norm(pre_noise))))

    engine = RoundEngine(
        plan, RandomUpdates(plan, dim), population_of(plan), dim, rounds=plan.rounds, on_encoded=hook
    )
    for round_index in range(3):
        engine.run(RoundContext(round_index, round_index, seed=1), torch.zeros(dim))
    assert len(seen) > 50
    clip = {"a": 0.5, "b": 2.0}
    assert all(norm <= clip[g] for g, norm in seen)
    # Clipping is active (not vacuous): most updates were far above the clip norm.
    assert sum(norm > 0.99 * clip[g] for g, norm in seen) > len(seen) // 2


def test_plan_that_underpays_noise_shares_is_refused():
    plan = hand_plan([("a", 1.0, 100, 0.3)], [("pa", ["a"], 1.0, 10, 1.0)])
    # The named bug: shares divided by sqrt(K) (K = 30 expected clients) instead of sqrt(m_P).
    bad = plan.model_copy(deep=True)
    bad.pools[0].noise_share_std = 1.0 / math.sqrt(30)
    with pytest.raises(InvalidInputError, match="under-noises"):
        pool_mechanisms(bad, 100, 10)
    private_without_noise = plan.model_copy(deep=True)
    private_without_noise.pools[0].noise_multiplier = 0.0
    private_without_noise.pools[0].noise_std = 0.0
    private_without_noise.pools[0].noise_share_std = 0.0
    with pytest.raises(InvalidInputError, match="would not protect"):
        pool_mechanisms(private_without_noise, 100, 10)


def test_a_replan_that_exhausts_a_group_runs():
    """A re-plan puts an exhausted group (epsilon kept, sampled at rate 0) in a pool without noise: the
    run follows it (it refused it, "pools.P2.noise_multiplier: is 0 but group(s) a have an epsilon",
    so a run could not follow an operator's budget change that stops a group); the group releases
    nothing, and a group sampled in such a pool stays refused (above)."""
    from planner import Changes
    from planner import ledger as plan_ledger
    from planner.replan import replan

    plan = hand_plan([("a", 3.0, 40, 0.5), ("b", 5.0, 30, 0.6)], [("pa", ["a"], 3.0, 6, 1.0), ("pb", ["b"], 3.0, 5, 1.0)],
                     model_dim=100, rounds=4)
    spent = plan_ledger.epsilon_spent(plan, plan.group("a"), 2)
    child = replan(plan, 2, Changes.model_validate({"groups": [{"id": "a", "epsilon": spent}], "expected_clients": 15}))
    a = child.group("a")
    assert a.status == "exhausted" and a.sampling_rate == 0 and child.pool(a.pool).noise_share_std == 0
    mechanisms = pool_mechanisms(child, 100, child.rounds)
    assert {m.pool_id for m in mechanisms} == {p.id for p in child.pools}


def test_round_is_a_function_of_seed_and_round_index():
    dim = 64
    plan = hand_plan([("a", 1.0, 40, 0.5)], [("pa", ["a"], 1.0, 4, 0.25)], model_dim=dim)
    update = torch.linspace(-0.02, 0.02, dim)
    first = make_engine(plan, dim, update).run(RoundContext(3, 3, seed=7), torch.zeros(dim))[0]
    again = make_engine(plan, dim, update).run(RoundContext(3, 3, seed=7), torch.zeros(dim))[0]
    other = make_engine(plan, dim, update).run(RoundContext(3, 3, seed=8), torch.zeros(dim))[0]
    assert torch.equal(first, again)
    assert not torch.equal(first, other)
    # keep ratio 0.25: exactly 16 coordinates move
    assert int((first != 0).sum()) == 16


def _outcome_key(outcome):
    return (outcome.sampled, outcome.survived, outcome.aborted_pools, outcome.abort_reasons,
            outcome.dropped_before_masking, outcome.dropped_after_masking, outcome.secagg)


def test_exact_sum_rounds_are_the_protocol_rounds_bit_for_bit():
    """Dropouts before and after masking, an SecAgg+ pool, a full pool and an aborting pool."""
    dim = 40
    plan = hand_plan(
        [("a", 1.0, 400, 0.4), ("b", 2.0, 60, 0.4), ("c", 2.0, 20, 0.2)],
        [("pa", ["a"], 1.0, 120, 1.0), ("pb", ["b"], 1.0, 15, 1.0), ("pc", ["c"], 1.0, 6, 1.0)],
        model_dim=dim,
        dropout_rate=0.01,
    )
    update = torch.linspace(-0.02, 0.02, dim)
    runs = {}
    for execution in ("protocol", "exact_sum"):
        engine = make_engine(plan, dim, update, late_dropout_fraction=0.5, secagg_execution=execution)
        params, outcomes = torch.zeros(dim), []
        for round_index in range(2):
            params, outcome = engine.run(RoundContext(round_index, round_index, seed=21), params)
            outcomes.append(outcome)
        runs[execution] = (params, outcomes)
    (p1, o1), (p2, o2) = runs["protocol"], runs["exact_sum"]
    assert torch.equal(p1, p2)
    for a, b in zip(o1, o2):
        assert _outcome_key(a) == _outcome_key(b)
        for pool_id, total in a.pool_sums.items():
            other = b.pool_sums[pool_id]
            assert (total is None and other is None) or total.tobytes() == other.tobytes()
        assert a.keystream_bytes > 0 == b.keystream_bytes
    # The rounds exercised what they claim: SecAgg+ for the large pool, dropouts of both kinds, an abort.
    assert o1[0].secagg["pa"].startswith("sparse k=") and o1[0].secagg["pb"] == "full"
    assert sum(o.dropped_before_masking for o in o1) and sum(o.dropped_after_masking for o in o1)
    assert any("pc" in o.aborted_pools for o in o1)


def test_secagg_mode_auto_follows_the_plan_and_can_be_forced():
    dim = 8
    plan = hand_plan([("a", 1.0, 400, 0.4), ("b", 2.0, 60, 0.5)],
                     [("pa", ["a"], 1.0, 120, 1.0), ("pb", ["b"], 1.0, 15, 1.0)], model_dim=dim)
    auto = make_engine(plan, dim)
    assert auto.pool_graphs == {"pa": "sparse", "pb": "full"}
    assert make_engine(plan, dim, secagg_mode="full").pool_graphs == {"pa": "full", "pb": "full"}
    small = hand_plan([("b", 2.0, 60, 0.5)], [("pb", ["b"], 1.0, 15, 1.0)], model_dim=dim)
    _, outcome = make_engine(small, dim, secagg_mode="sparse").run(RoundContext(0, 0, seed=2), torch.zeros(dim))
    assert outcome.secagg["pb"].startswith("sparse k=")  # 30 clients: a Harary graph still exists
    with pytest.raises(InvalidInputError, match="secagg"):
        make_engine(plan, dim, secagg_mode="ring")
