"""A plan round on a Flower Grid: the real ClientApp over LoopbackGrid, the mechanism checked end to end."""

from __future__ import annotations

import numpy as np
import torch
from scipy import stats

from tests.trainer.flower.conftest import Observed, random_updates, zero_updates
from tests.trainer.trainer_plans import hand_plan
from trainer.flower import messages
from trainer.strategies import RoundContext


def two_pools(dim: int, **options):
    return hand_plan(
        [("strict", 1.0, 8, 1.0), ("loose", 4.0, 8, 1.0)],
        [("p_strict", ["strict"], 1.2, 3, 0.3), ("p_loose", ["loose"], 0.4, 4, 1.0)],
        rounds=4, model_dim=dim, **options,
    )


def test_pool_sums_are_the_plain_sums_of_the_survivors_privatised_vectors(make_grid_engine):
    dim = 300
    plan = two_pools(dim)
    gone_at = {1001: messages.MASKED, 1009: messages.MASKED, 1010: messages.UNMASK, 1003: messages.KEYS}
    observed = Observed()
    grid, engine = make_grid_engine(plan, dim, update=random_updates(), observed=observed,
                                    drop=lambda node, kind, _round: gone_at.get(node) == kind)
    params = torch.zeros(dim)
    new_params, outcome = engine.run(RoundContext(0, 0, seed=4), params)
    assert outcome.aborted_pools == []
    for pool in plan.pools:
        participants, survivors = engine.last_sessions[pool.id]
        # dropped before masking: not in the sum; dropped after masking (1010): in it, recovered
        assert not {1001, 1003, 1009} & set(survivors)
        assert (1010 in survivors) == (pool.id == "p_loose")
        expected = sum(observed.vectors[(node, pool.id)] for node in survivors)
        np.testing.assert_array_equal(outcome.pool_sums[pool.id], expected)
        assert outcome.survived[pool.id] == len(survivors) >= pool.secagg_threshold
    sampled_nodes = sum(len(engine.last_sessions[p.id][0]) for p in plan.pools)
    assert outcome.dropped_before_masking == 3 and outcome.dropped_after_masking == 1
    assert sum(outcome.sampled.values()) == sampled_nodes
    # top-k per pool and the fixed denominator K, exactly as the simulator's PlanStrategy
    expected_update = engine.strategy.aggregate(
        RoundContext(0, 0, seed=4), {p: torch.from_numpy(s) for p, s in outcome.pool_sums.items()}, dim
    )
    torch.testing.assert_close(new_params, params + expected_update.float())
    assert {f.step for f in engine.failures} == {messages.KEYS, messages.MASKED, messages.UNMASK}


def test_zero_updates_release_noise_of_n_share_variances(make_grid_engine):
    dim = 4000
    plan = hand_plan(
        [("a", 1.0, 10, 0.9), ("b", 2.0, 8, 0.9), ("c", 4.0, 12, 0.8)],
        [("pa", ["a"], 2.0, 5, 1.0), ("pb", ["b"], 1.0, 3, 1.0), ("pc", ["c"], 0.5, 2, 1.0)],
        clip_norm=1.5, model_dim=dim, rounds=2,
    )
    _, engine = make_grid_engine(plan, dim, update=zero_updates)
    checked = 0
    for round_index in range(2):
        _, outcome = engine.run(RoundContext(round_index, round_index, seed=21), torch.zeros(dim))
        for pool in plan.pools:
            released = outcome.pool_sums[pool.id]
            if released is None:
                continue
            n = outcome.survived[pool.id]
            expected = pool.noise_multiplier**2 * 1.5**2 * n / pool.secagg_threshold
            lo = expected * stats.chi2.ppf(0.0005, dim - 1) / (dim - 1)
            hi = expected * stats.chi2.ppf(0.9995, dim - 1) / (dim - 1)
            assert lo <= float(np.var(released, ddof=1)) <= hi, (pool.id, n)
            # dividing the shares by the expected participation K instead of m_P would show
            buggy = pool.noise_multiplier**2 * 1.5**2 * n / plan.scenario.participation
            assert not lo <= buggy <= hi
            checked += 1
    assert checked >= 5


def test_too_few_sampled_or_surviving_aborts_the_pool_and_releases_nothing(make_grid_engine):
    dim = 50
    plan = hand_plan(
        [("few", 1.0, 3, 0.9), ("many", 2.0, 8, 0.9)],
        [("p_few", ["few"], 1.0, 4, 1.0), ("p_many", ["many"], 1.0, 5, 1.0)],
        model_dim=dim, rounds=2,
    )
    many = [1003 + i for i in range(8)]
    # all but three of the sampled "many" nodes vanish before sending y_u: 3 < m_P = 5 survive
    grid, engine = make_grid_engine(plan, dim, update=random_updates(),
                                    drop=lambda node, kind, _r: kind == messages.MASKED and node in many[3:])
    params, outcome = engine.run(RoundContext(0, 0, seed=2), torch.zeros(dim))
    assert outcome.aborted_pools == ["p_few", "p_many"]
    assert "fewer than the threshold m_P=4" in outcome.abort_reasons["p_few"]
    assert "fewer than the threshold 5" in outcome.abort_reasons["p_many"]
    assert outcome.pool_sums == {"p_few": None, "p_many": None}
    assert torch.equal(params, torch.zeros(dim))
    # the nodes that never sent y_u were not asked to unmask; nobody was
    assert not [m for m in grid.delivered if m.metadata.message_type == messages.UNMASK]


def test_a_node_refuses_another_pools_session_a_lower_threshold_another_session_and_a_second_round(make_grid_engine):
    dim = 40
    plan = two_pools(dim)
    grid, engine = make_grid_engine(plan, dim, update=random_updates())
    engine.run(RoundContext(0, 0, seed=1), torch.zeros(dim))
    participants, _ = engine.last_sessions["p_loose"]
    session = messages.Session(
        pool_id="p_loose", global_round=1, plan_fingerprint=engine.membership.plan_fingerprint,
        session_id=b"s" * 16, participants=(1000, *participants), params=engine_params(engine, "p_loose", 9),
        graph={},
    )
    from trainer.secagg.graph import neighbour_sets

    session = messages.Session(**{**session.__dict__, "graph": neighbour_sets(range(len(session.participants)), None, 0)})

    def ask(node, kind, content):
        from flwr.app import Message

        reply = list(grid.send_and_receive([Message(content, node, kind)]))[0]
        return reply.error.reason if reply.has_error() else None

    # node 1000 is in group strict (pool p_strict)
    reason = ask(1000, messages.KEYS, messages.keys_request(session, np.zeros(dim, dtype=np.float32)))
    assert "refuses a session of pool p_loose" in reason
    # a loose node asked with the pool's threshold lowered
    weak = engine_params(engine, "p_loose", 9, threshold=1)
    reason = ask(participants[0], messages.KEYS,
                 messages.keys_request(messages.Session(**{**session.__dict__, "params": weak}), np.zeros(dim, np.float32)))
    assert "threshold 1 (the plan's m_P is 4)" in reason
    # a later step naming a session the node did not join: refused, and its state is kept
    joined = messages.keys_request(session, np.zeros(dim, dtype=np.float32))
    assert ask(participants[0], messages.KEYS, joined) is None
    other = messages.Session(**{**session.__dict__, "session_id": b"t" * 16})
    reason = ask(participants[0], messages.SHARES, messages.shares_request(other, {}))
    assert "takes part in pool p_loose's session" in reason
    # one session per round, in order, within the plan's rounds: a second session of the same
    # round would release the node's update again with fresh noise
    again = messages.keys_request(other, np.zeros(dim, dtype=np.float32))
    assert "already took part in round 1" in ask(participants[0], messages.KEYS, again)
    late = messages.Session(**{**session.__dict__, "global_round": 99})
    reason = ask(participants[1], messages.KEYS, messages.keys_request(late, np.zeros(dim, np.float32)))
    assert "round 99 is outside the plan's rounds [0, 4)" in reason
    # a node that never joined refuses the protocol's later steps
    reason = ask(1001, messages.UNMASK, messages.unmask_request(session, (0, 1)))
    assert "has not joined a session" in reason


def engine_params(engine, pool_id, clients, threshold=None):
    from trainer.secagg import choose_params

    mechanism = next(m for m in engine.mechanisms if m.pool_id == pool_id)
    return choose_params(clients, threshold or mechanism.threshold, mechanism.value_bound, scale=mechanism.scale,
                         protocol_version=messages.PROTOCOL_VERSION)


def test_the_server_receives_protocol_messages_only(make_grid_engine):
    from flwr.app import MetricRecord

    from trainer.secagg import encode

    dim = 200
    plan = two_pools(dim)
    observed = Observed()
    grid, engine = make_grid_engine(plan, dim, update=random_updates(0.02), observed=observed)
    engine.run(RoundContext(0, 0, seed=8), torch.zeros(dim))
    allowed = {"cipher_public_key", "mask_public_key", "recipients", "ciphertexts", "group", "plan_fingerprint",
               "gdpfed_version", "flwr_version", "protocol_version", "secagg_mechanism"} | {f"{k}_{f}" for k in ("self_mask", "mask_key") for f in ("owners", "x", "data")}
    masked = {}
    for reply in grid.received:
        assert reply.has_content(), reply.error
        for name, record in reply.content.items():
            assert not isinstance(record, MetricRecord), name
            if name == messages.MASKED_VECTOR:
                y = record["y"].numpy()
                assert y.dtype in (np.uint32, np.uint64)
                masked[reply.metadata.src_node_id] = y
            else:
                assert name == messages.REPLY and set(record) <= allowed, set(record) - allowed
    assert masked
    for (node, pool), vector in observed.vectors.items():
        session = engine.last_sessions[pool]
        params = engine_params(engine, pool, len(session[0]))
        encoded = encode(vector, scale=params.scale, modulus_bits=params.modulus_bits, value_bound=params.value_bound,
                         rng=np.random.default_rng(0))
        y = masked[node]
        # y_u is one-time padded: it agrees with the encoded input about as often as chance
        assert np.mean(y == encoded) < 0.01
        # the plaintext never appears in any message the server received
        assert vector.tobytes() not in b"".join(bytes(v) for r in grid.received for rec in r.content.values()
                                                 if hasattr(rec, "items") for v in _raw(rec))


def _raw(record):
    for value in record.values():
        if isinstance(value, bytes):
            yield value
        elif isinstance(value, list):
            yield from (v for v in value if isinstance(v, bytes))
        elif hasattr(value, "numpy"):
            yield value.numpy().tobytes()


def test_membership_leaves_out_other_plans_and_unknown_groups_and_meets_late_nodes(make_grid_engine, tmp_path):
    dim = 30
    plan = two_pools(dim)
    other = two_pools(dim, delta=1e-6)
    pinned = tmp_path / "other-plan.json"
    pinned.write_text(other.model_dump_json())
    nodes = {1000 + i: {"gdpfed-group": "strict" if i < 8 else "loose", "partition-id": i} for i in range(16)}
    nodes[1000]["gdpfed-plan"] = str(pinned)
    nodes[1001]["gdpfed-group"] = "nobody"
    grid, engine = make_grid_engine(plan, dim, update=random_updates(), nodes=nodes)
    grid.offline.add(1015)
    engine.membership.refresh()
    assert set(engine.membership.excluded) == {1000, 1001}
    assert engine.membership.excluded[1000] == "holds another plan"
    assert "gdpfed-group: 'nobody' is not a group of the plan" in engine.membership.excluded[1001]
    population = engine.membership.population()
    assert sorted(population.clients("strict").tolist()) == list(range(1002, 1008))
    assert 1015 not in population.clients("loose").tolist()
    grid.offline.clear()
    engine.run(RoundContext(0, 0, seed=3), torch.zeros(dim))
    assert engine.membership.groups[1015] == "loose"
    assert engine.membership.joined_line() == "14 node(s) joined: strict=6, loose=8"  # the ServerApp's line


def test_session_and_state_records_round_trip():
    from trainer.secagg import Client, choose_params, new_session

    params = choose_params(3, 2, 1.0, mode="sparse", neighbours=2)
    setup = new_session(range(3), params, None)
    session = messages.Session("p", 3, "f" * 64, setup.session_id, (11, 2**63 + 5, 7), params, dict(setup.graph))
    again = messages.session_from_record(messages.session_record(session))
    assert again == session
    state = Client(1, np.zeros(5), params, setup, None).state()
    record, array = messages.state_to_records(session, state)
    restored_session, restored = messages.state_from_records(record, array)
    assert restored_session == session and restored.secrets == state.secrets
    np.testing.assert_array_equal(restored.encoded_input, state.encoded_input)


def test_a_sparse_session_carries_its_share_threshold():
    """Bell et al.'s t travels with the session: without it a node would rebuild params with
    the pool threshold scaled to its share group and disagree with the server."""
    from trainer.secagg import choose_params, new_session

    params = choose_params(12, 6, 1.0, mode="sparse", neighbours=4, share_threshold=3)
    setup = new_session(range(12), params, None)
    session = messages.Session("p", 0, "f" * 64, setup.session_id, tuple(range(12)), params, dict(setup.graph))
    again = messages.session_from_record(messages.session_record(session))
    assert again.params.share_threshold == 3 and again == session


def test_a_re_planned_plan_stops_the_run_instead_of_running_without_the_nodes_plan(make_grid_engine):
    import pytest

    from trainer.flower.engine import FlowerEngineFactory
    from trainer.run.reporting import ReportingStoppedError

    dim = 20
    plan = two_pools(dim)
    grid, engine = make_grid_engine(plan, dim, update=random_updates())
    from trainer.run.config import TrainConfig

    factory = FlowerEngineFactory(grid, engine.membership, plan)
    population = engine.membership.population()
    config = TrainConfig(dataset="digits", model="mlp", rounds=4)
    assert factory(plan, engine.strategy, population, dim, config, 4).plan is plan
    successor = plan.model_copy(update={"start_round": 2})
    with pytest.raises(ReportingStoppedError, match="carry the old plan in their app bundle"):
        factory(successor, engine.strategy, population, dim, config, 2)
