"""The discrete (Skellam) mechanism on Flower equals `gdpfed train --secagg-mechanism skellam`,
and the wire's protocol version and mechanism are exchanged and refused when they differ
(docs/flower.md §2 "The discrete mechanism and the wire version").

Each node computes its Skellam share from its own copy of the plan (its block re-derived,
its rotation seed from its run seed and the round) and refuses a session that states
another; the server decodes, unrotates and rescales, and the ledger counts the plan's
discrete event (``trainer.units.client.tally.ClientTally`` with mechanism skellam).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from planner import make_plan
from planner.schema import Scenario
from tests.trainer.flower.conftest import write_plan_bundle
from tests.trainer.trainer_plans import comparable, quiet_progress
from trainer.data import load_dataset
from trainer.flower import messages
from trainer.flower.client_app import NodeClient, build_client_app
from trainer.flower.server_app import run_plan
from trainer.flower.settings import FlowerOptions, run_config_of
from trainer.flower.testing import LoopbackGrid
from trainer.run.checkpoint import load_checkpoint
from trainer.run.metrics import read_rounds
from trainer.runner import TrainConfig, execute_run, prepare_run
from trainer.units.client.rounds import RoundEngine
from trainer.units.client.tally import ClientTally

ROUNDS = 2
CLIENTS = 12


def skellam_plan(dropout_rate: float, model_dim: int = 1210, rounds: int = ROUNDS) -> Any:
    """Two pools with their discrete blocks stated (``report_discrete: true``), for the model
    below (1210 parameters) unless ``model_dim`` says otherwise."""
    scenario = Scenario(
        groups=[{"id": "strict", "epsilon": 4.0, "num_clients": 6}, {"id": "loose", "epsilon": 12.0, "num_clients": 6}],
        delta=1e-4, rounds=rounds, clip_norm=1.0, model_dim=model_dim, expected_clients=8, min_clients_per_pool=2,
        dropout_rate=dropout_rate, report_discrete=True,
    )
    plan = make_plan(scenario, "gdpfed")
    assert all(pool.discrete is not None for pool in plan.pools), plan.warnings
    return plan


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", num_clients=CLIENTS, seed=0)


def config(**overrides: Any) -> TrainConfig:
    base: dict[str, Any] = dict(dataset="digits", model="mlp", model_options={"hidden": [16]}, rounds=ROUNDS,
                                local_steps=2, lr=0.1, batch_size=16, engine="loop", server_momentum=0.5,
                                secagg_mechanism="skellam")
    base.update(overrides)
    return TrainConfig(**base)


def simulate(plan: Any, run_config: TrainConfig, out: Path, data: Any, monkeypatch: Any) -> tuple[Any, dict[int, set[int]]]:
    """`gdpfed train`'s run, and per round the clients it dropped before masking."""
    early_by_round: dict[int, set[int]] = {}
    dropouts = RoundEngine._dropouts

    def recorded(self: RoundEngine, ctx: Any, selection: Any, mechanisms: Any) -> Any:
        participants, early, late = dropouts(self, ctx, selection, mechanisms)
        early_by_round[ctx.global_round] = set(early)
        return participants, early, late

    with monkeypatch.context() as patch:
        patch.setattr(RoundEngine, "_dropouts", recorded)
        summary = execute_run(prepare_run(plan, plan.model_dump(mode="json"), run_config, out, dataset=data),
                              progress=quiet_progress(ROUNDS))
    return summary, early_by_round


def flower(plan: Any, run_config: TrainConfig, tmp_path: Path, data: Any,
           early_by_round: dict[int, set[int]]) -> tuple[Any, LoopbackGrid]:
    """The same run on Flower: node 1000 + i is client i, drawing its noise as `gdpfed train`
    does; the clients the simulator dropped before masking vanish at the MASKED step."""
    flat = run_config_of(FlowerOptions.model_validate({"out-dir": str(tmp_path / "flower")}), run_config)
    nodes = {1000 + i: {"partition-id": i, "gdpfed-simulation": True} for i in range(CLIENTS)}

    def drop(node: int, kind: str, group_id: str) -> bool:
        return kind == messages.MASKED and node - 1000 in early_by_round.get(int(group_id), set())

    grid = LoopbackGrid(build_client_app(write_plan_bundle(tmp_path / "bundle", plan)), nodes, flat, drop=drop)
    summary = run_plan(grid, plan.model_dump(mode="json"), flat, dataset=data, progress=quiet_progress(ROUNDS))
    return summary, grid


def test_a_skellam_run_on_flower_equals_gdpfed_train_with_dropouts_and_counts_the_skellam_event(
        digits, tmp_path, monkeypatch):
    plan = skellam_plan(dropout_rate=0.25)
    simulated, early = simulate(plan, config(), tmp_path / "sim", digits, monkeypatch)
    assert any(early.values())  # some sampled clients dropped before masking
    summary, grid = flower(plan, config(), tmp_path, digits, early)

    flower_rounds = read_rounds(tmp_path / "flower" / "rounds.jsonl")
    assert comparable(flower_rounds) == comparable(read_rounds(tmp_path / "sim" / "rounds.jsonl"))
    assert sum(r.dropped_before_masking for r in flower_rounds) > 0
    assert sum(sum(r.survived.values()) for r in flower_rounds) > 0
    assert torch.equal(load_checkpoint(tmp_path / "flower" / "checkpoint.pt")["global_params"],
                       load_checkpoint(tmp_path / "sim" / "checkpoint.pt")["global_params"])
    same = ("epsilon_spent", "epsilon_rdp", "epsilon_tight", "aborted_rounds", "final_accuracy", "final_loss",
            "rounds_run", "secagg_mechanism")
    assert summary.model_dump(include=set(same)) == simulated.model_dump(include=set(same))
    # the ledger counts the plan's Skellam event, not the continuous Gaussian's
    tally = ClientTally(plan, mechanism="skellam")
    for _ in range(ROUNDS):
        tally.record_round()
    assert summary.secagg_mechanism == "skellam" and summary.epsilon_spent == tally.final_spent()
    gaussian = ClientTally(plan)
    for _ in range(ROUNDS):
        gaussian.record_round()
    assert summary.epsilon_spent != gaussian.final_spent()
    # the nodes sent residues mod the block's 2^b, under the wire's version
    sessions = [messages.session_of(m.content) for m in grid.delivered if m.metadata.message_type == messages.KEYS]
    assert sessions and all(s.mechanism == "skellam" and s.params.encoding == "residues" for s in sessions)
    assert all(s.params.protocol_version == messages.PROTOCOL_VERSION for s in sessions)
    assert {s.params.modulus_bits for s in sessions} <= {p.discrete.bits for p in plan.pools}


def test_a_model_smaller_than_the_blocks_runs_zero_padded_on_flower_as_in_gdpfed_train(digits, tmp_path, monkeypatch):
    """The 1210-parameter model on blocks calibrated for 5000 coordinates: the nodes pad their
    updates to the block's dimension as gdpfed train's clients do (DiscretePool), the server keeps
    the model's coordinates, and the ledger is the blocks' (docs/secure-aggregation.md §Discrete
    noise, "A model smaller than the plan's model_dim")."""
    plan = skellam_plan(dropout_rate=0.25, model_dim=5000)
    simulated, early = simulate(plan, config(), tmp_path / "sim", digits, monkeypatch)
    summary, _ = flower(plan, config(), tmp_path, digits, early)
    assert torch.equal(load_checkpoint(tmp_path / "flower" / "checkpoint.pt")["global_params"],
                       load_checkpoint(tmp_path / "sim" / "checkpoint.pt")["global_params"])
    tally = ClientTally(plan, mechanism="skellam")
    for _ in range(ROUNDS):
        tally.record_round()
    assert summary.secagg_mechanism == simulated.secagg_mechanism == "skellam"
    assert summary.epsilon_spent == simulated.epsilon_spent == tally.final_spent()


def test_fedhdp_with_skellam_on_flower_equals_gdpfed_train(tmp_path):
    """FedHDP (ratios, Ditto personal models on the nodes): the private pool's Skellam shares
    and the opted-out pool's fixed-point session (no noise to discretise) in one round."""
    from planner.finalize import with_discrete
    from tests.trainer.trainer_plans import hand_plan

    clients = 14
    plan = hand_plan([("private", 3.0, 10, 0.6), ("out", None, 4, 0.5)],
                     [("P1", ["private"], 1.0, 2, 1.0), ("P2", ["out"], 0.0, 1, 1.0)],
                     rounds=ROUNDS, model_dim=700, method="gdpfed")
    plan = with_discrete(plan.model_copy(update={"scenario": plan.scenario.model_copy(update={"report_discrete": True})}))
    assert plan.pool("P1").discrete is not None and plan.pool("P2").discrete is None
    data = load_dataset("digits", num_clients=clients, partition="one_label", seed=0, client_test_fraction=0.25)
    run_config = config(model_options={"hidden": [10]}, batch_size=8, partition="one_label",
                        dataset_options={"client_test_fraction": 0.25}, eval_every=1, strategy="fedhdp",
                        strategy_options={"ratios": {"P1": 0.3}, "lambdas": {"private": 0.1, "out": 0.02}})
    simulated = execute_run(prepare_run(plan, plan.model_dump(mode="json"), run_config, tmp_path / "sim", dataset=data),
                            progress=quiet_progress(ROUNDS))
    flat = run_config_of(FlowerOptions.model_validate({"out-dir": str(tmp_path / "flower")}), run_config)
    nodes = {1000 + i: {"partition-id": i, "gdpfed-simulation": True} for i in range(clients)}
    grid = LoopbackGrid(build_client_app(write_plan_bundle(tmp_path / "bundle", plan)), nodes, flat)
    summary = run_plan(grid, plan.model_dump(mode="json"), flat, dataset=data, progress=quiet_progress(ROUNDS))

    assert comparable(read_rounds(tmp_path / "flower" / "rounds.jsonl")) == comparable(
        read_rounds(tmp_path / "sim" / "rounds.jsonl"))
    assert torch.equal(load_checkpoint(tmp_path / "flower" / "checkpoint.pt")["global_params"],
                       load_checkpoint(tmp_path / "sim" / "checkpoint.pt")["global_params"])
    same = ("epsilon_spent", "epsilon_rdp", "epsilon_tight", "final_accuracy", "personal_accuracy_by_group",
            "secagg_mechanism")
    assert summary.model_dump(include=set(same)) == simulated.model_dump(include=set(same))
    assert summary.secagg_mechanism == "skellam"
    encodings = {(s.pool_id, s.params.encoding) for s in (messages.session_of(m.content) for m in grid.delivered
                                                           if m.metadata.message_type == messages.KEYS)}
    assert encodings == {("P1", "residues"), ("P2", "fixed_point")}


def test_adaptive_fedhdp_with_skellam_on_flower_equals_gdpfed_train_and_counts_the_count(tmp_path):
    """Adaptive clipping under skellam (docs/secure-aggregation.md §Discrete noise, "Adaptive
    clipping"): each node clips at the session's S^t, sends its share with the integer count
    coordinate; the server decodes update and count, rescales by S^t / C and moves S^t. The
    parameters, S^t, counts and ledger (the Skellam event with the count) are gdpfed train's."""
    from planner.finalize import with_discrete
    from tests.trainer.test_adaptive_clip import with_adaptive_clip
    from tests.trainer.trainer_plans import hand_plan

    clients, rounds = 14, 3
    plan = with_adaptive_clip(hand_plan([("private", 3.0, 10, 0.6), ("out", None, 4, 0.5)],
                                        [("P1", ["private"], 1.0, 2, 1.0), ("P2", ["out"], 0.0, 1, 1.0)],
                                        rounds=rounds, model_dim=700, method="gdpfed"),
                              count_noise_std=2.0, learning_rate=0.5)
    plan = with_discrete(plan.model_copy(update={"scenario": plan.scenario.model_copy(update={"report_discrete": True})}))
    block = plan.pool("P1").discrete
    assert block is not None and block.count_factor >= 1
    data = load_dataset("digits", num_clients=clients, partition="one_label", seed=0, client_test_fraction=0.25)
    run_config = config(model_options={"hidden": [10]}, rounds=rounds, batch_size=8, partition="one_label",
                        dataset_options={"client_test_fraction": 0.25}, eval_every=1, strategy="fedhdp",
                        strategy_options={"ratios": {"P1": 0.3}, "lambdas": {"private": 0.1, "out": 0.02},
                                          "adaptive_clip": True})
    simulated = execute_run(prepare_run(plan, plan.model_dump(mode="json"), run_config, tmp_path / "sim", dataset=data),
                            progress=quiet_progress(rounds))
    flat = run_config_of(FlowerOptions.model_validate({"out-dir": str(tmp_path / "flower")}), run_config)
    nodes = {1000 + i: {"partition-id": i, "gdpfed-simulation": True} for i in range(clients)}
    grid = LoopbackGrid(build_client_app(write_plan_bundle(tmp_path / "bundle", plan)), nodes, flat)
    summary = run_plan(grid, plan.model_dump(mode="json"), flat, dataset=data, progress=quiet_progress(rounds))

    flower_rounds = read_rounds(tmp_path / "flower" / "rounds.jsonl")
    assert comparable(flower_rounds) == comparable(read_rounds(tmp_path / "sim" / "rounds.jsonl"))
    assert torch.equal(load_checkpoint(tmp_path / "flower" / "checkpoint.pt")["global_params"],
                       load_checkpoint(tmp_path / "sim" / "checkpoint.pt")["global_params"])
    same = ("epsilon_spent", "epsilon_rdp", "epsilon_tight", "aborted_rounds", "final_accuracy", "final_loss",
            "personal_accuracy_by_group", "rounds_run", "secagg_mechanism")
    assert summary.model_dump(include=set(same)) == simulated.model_dump(include=set(same))
    assert summary.secagg_mechanism == "skellam"
    # S^t moved, from the decoded counts
    clips = [r.clip_norm for r in flower_rounds]
    assert None not in clips and len(set(clips)) > 1
    assert all(r.unclipped_fraction is not None for r in flower_rounds if not r.aborted_pools)
    # the ledger counts the plan's Skellam event with the count's sensitivity
    tally = ClientTally(plan, mechanism="skellam")
    for _ in range(rounds):
        tally.record_round()
    assert summary.epsilon_spent == tally.final_spent()
    # the private pool's nodes sent residues with the count coordinate: the session names S^t
    sessions = [messages.session_of(m.content) for m in grid.delivered if m.metadata.message_type == messages.KEYS]
    private = [s for s in sessions if s.pool_id == "P1"]
    assert private and all(s.params.encoding == "residues" and s.clip_norm is not None for s in private)


class OldNodes(NodeClient):
    """Nodes of a gdpfed before the wire stated a version: their HELLO states none (version 1)."""

    old: frozenset[int] = frozenset()

    def hello(self, content: Any, context: Any) -> Any:
        reply = super().hello(content, context)
        if context.node_id in self.old:
            record = reply.config_records[messages.REPLY]
            del record["protocol_version"]
            del record["secagg_mechanism"]
        return reply


def skellam_grid(plan: Any, tmp_path: Path, dim: int,
                 client: type[NodeClient] = NodeClient) -> tuple[LoopbackGrid, Any, list[str]]:
    """A skellam FlowerRoundEngine over in-process nodes (fixed random updates, no torch training)."""
    from tests.trainer.flower.conftest import RUN_CONFIG, nodes_by_group, random_updates

    bundle = write_plan_bundle(tmp_path / "bundle", plan)
    nodes = client(bundle, local_update=random_updates())
    grid = LoopbackGrid(build_client_app(bundle, nodes), nodes_by_group(plan), {**RUN_CONFIG, "secagg-mechanism": "skellam"})
    log: list[str] = []
    return grid, skellam_engine(grid, plan, dim, log), log


def skellam_engine(grid: LoopbackGrid, plan: Any, dim: int, log: list[str]) -> Any:
    """The ServerApp's skellam FlowerRoundEngine of ``plan`` over ``grid``'s nodes."""
    from trainer.flower.client_app import plan_fingerprint
    from trainer.flower.engine import FlowerRoundEngine, Membership
    from trainer.units.client.strategies import PlanStrategy

    membership = Membership(grid, plan, plan_fingerprint(plan), timeout=5.0, log=log.append, mechanism="skellam")
    strategy = PlanStrategy(plan, None, None, engine="loop", local=None, device=torch.device("cpu"))  # type: ignore[arg-type]
    return FlowerRoundEngine(grid, membership, plan, strategy, dim, secagg_mechanism="skellam", log=log.append)


class EveryMessageANewProcess(NodeClient):
    """Nodes as a deployment runs them, each message in a new process: nothing the node
    derived in one message's process is left in the next's, except what its ``Context.state`` keeps."""

    def keys(self, content: Any, context: Any) -> Any:
        self._discrete.clear()
        return super().keys(content, context)


def test_a_node_derives_its_plans_blocks_once_per_plan_and_again_for_a_changed_plan(tmp_path, monkeypatch):
    """The planner's re-derivation of the blocks (the costly part of a node's check) runs once
    per node and plan, kept in the node's Context.state under its plan copy's fingerprint, not
    in every KEYS message's process; a changed plan copy is derived again (docs/flower.md §2
    "The discrete mechanism and the wire version")."""
    from importlib.metadata import version

    import trainer.units.client.discrete as discrete
    from trainer.flower.client_app import plan_fingerprint
    from trainer.strategies import RoundContext

    plan = skellam_plan(dropout_rate=0.0)
    dim = plan.scenario.model_dim
    grid, engine, log = skellam_grid(plan, tmp_path, dim, EveryMessageANewProcess)
    derivations: list[int] = []
    derive = discrete.derived_pool_mechanisms

    def counted(*args: Any, **kwargs: Any) -> Any:
        derivations.append(1)
        return derive(*args, **kwargs)

    monkeypatch.setattr(discrete, "derived_pool_mechanisms", counted)

    def keys_to(rounds: set[int]) -> list[int]:
        return [m.metadata.dst_node_id for m in grid.delivered if m.metadata.message_type == messages.KEYS
                and messages.session_of(m.content).global_round in rounds]

    for global_round in range(ROUNDS):
        _, outcome = engine.run(RoundContext(global_round, global_round, seed=0), torch.zeros(dim))
        assert sum(outcome.survived.values()) > 0 and not outcome.aborted_pools
    joined = keys_to(set(range(ROUNDS)))
    assert len(joined) > len(set(joined))  # some nodes handled both rounds' KEYS messages
    assert len(derivations) == len(set(joined))  # each node derived its plan's blocks once
    # kept under the plan copy's fingerprint, the mechanism, the protocol and gdpfed versions; read
    # back as derived, and for no other key
    state = grid.contexts[joined[0]].state
    key: dict[str, str | int] = {"plan_fingerprint": plan_fingerprint(plan), "secagg_mechanism": "skellam",
                                 "protocol_version": messages.PROTOCOL_VERSION, "gdpfed_version": version("gdpfed")}
    assert messages.derived_blocks_of(state, key) == discrete.derived_blocks(plan)
    assert messages.derived_blocks_of(state, {**key, "protocol_version": 1}) is None
    assert messages.derived_blocks_of(state, {**key, "plan_fingerprint": "0" * 64}) is None

    # the plan changes (longer, so other blocks): each node's copy is the new plan, derived again
    longer = skellam_plan(dropout_rate=0.0, rounds=ROUNDS + 2)
    assert longer.pools[0].discrete != plan.pools[0].discrete
    pinned = write_plan_bundle(tmp_path / "longer", longer) / "plan.json"
    for context in grid.contexts.values():
        context.node_config = {**context.node_config, "gdpfed-plan": str(pinned)}
    engine = skellam_engine(grid, longer, dim, log)
    derivations.clear()  # the server's check of the new plan (its engine's)
    _, outcome = engine.run(RoundContext(ROUNDS, ROUNDS, seed=0), torch.zeros(dim))
    assert sum(outcome.survived.values()) > 0 and not outcome.aborted_pools
    rejoined = keys_to({ROUNDS})
    assert rejoined and len(derivations) == len(set(rejoined))
    assert all(grid.contexts[node].state.config_records[messages.DERIVED_BLOCKS]["plan_fingerprint"]
               == plan_fingerprint(longer) for node in rejoined)


def with_noisier_blocks(plan: Any, factor: float) -> Any:
    """``plan`` with every block's noise ``factor`` times the calibrated one (its bit width the one
    that noise needs): a block an earlier release's search wrote, which a run takes at its own noise
    once checked (docs/secure-aggregation.md §Discrete noise, "The trainer side")."""
    from planner.discrete import bits_for, widest_clip

    pools = []
    for pool in plan.pools:
        block = pool.discrete
        share = block.share_variance * factor
        bits, _ = bits_for(block.wrap_probability_per_round, block.max_clients, widest_clip(plan, pool.id),
                           block.scale, block.dimension, share, block.count_factor)
        changed = block.model_copy(update={"share_variance": share, "total_variance": share * block.honest_survivors,
                                           "bits": bits})
        pools.append(pool.model_copy(update={"discrete": changed}))
    return plan.model_copy(update={"pools": pools})


class CountingNode(EveryMessageANewProcess):
    """Counts, per node, its processes' compositions of a group's full-run Skellam ledger."""

    full_run: ClassVar[frozenset[str]] = frozenset()  # history_key of each group's full-run Skellam events
    composed: ClassVar[list[int]] = []  # the node id of each composition
    current: ClassVar[int | None] = None

    def keys(self, content: Any, context: Any) -> Any:
        CountingNode.current = context.node_id
        try:
            return super().keys(content, context)
        finally:
            CountingNode.current = None


def test_a_nodes_check_of_an_earlier_calibrations_block_runs_once_per_node_across_rounds(tmp_path, monkeypatch):
    """Blocks at another noise than today's derivation (an earlier release's) are checked at their own
    noise, every member's full-run Skellam ledger composed; a node keeps the check's outcome with the
    derived blocks in its Context.state (same key), so it composes them in its first KEYS message only,
    not in every message's process (docs/flower.md §2 "The discrete mechanism and the wire version")."""
    from importlib.metadata import version

    from planner import ledger as plan_ledger
    from planner.calibration import history_key
    from trainer.flower.client_app import plan_fingerprint
    from trainer.strategies import RoundContext
    from trainer.units.client.discrete import discrete_pools

    plan = with_noisier_blocks(skellam_plan(dropout_rate=0.0), 1.05)
    dim = plan.scenario.model_dim
    assert all(pool.own_noise for pool in discrete_pools(plan, dim).values())  # checked at their own noise
    CountingNode.full_run = frozenset(
        history_key(plan_ledger.run_history(plan, g, plan.rounds, "skellam")) for g in plan.groups
    )
    CountingNode.composed = []
    compose = plan_ledger.default_epsilon_fn

    def counted(events: Any, delta: float, accountant: Any) -> float:
        if CountingNode.current is not None and history_key(events) in CountingNode.full_run:
            CountingNode.composed.append(CountingNode.current)
        return compose(events, delta, accountant)

    monkeypatch.setattr(plan_ledger, "default_epsilon_fn", counted)
    grid, engine, _ = skellam_grid(plan, tmp_path, dim, CountingNode)
    for global_round in range(ROUNDS):
        _, outcome = engine.run(RoundContext(global_round, global_round, seed=0), torch.zeros(dim))
        assert sum(outcome.survived.values()) > 0 and not outcome.aborted_pools
    joined = [m.metadata.dst_node_id for m in grid.delivered if m.metadata.message_type == messages.KEYS]
    assert len(joined) > len(set(joined))  # some nodes handled both rounds' KEYS messages
    # each node composed every group's ledger once (the plan's groups are all in noised pools)
    assert sorted(CountingNode.composed) == sorted(node for node in set(joined) for _ in plan.groups)
    key: dict[str, str | int] = {"plan_fingerprint": plan_fingerprint(plan), "secagg_mechanism": "skellam",
                                 "protocol_version": messages.PROTOCOL_VERSION, "gdpfed_version": version("gdpfed")}
    assert messages.checked_blocks_of(grid.contexts[joined[0]].state, key) == {pool.id for pool in plan.pools}
    assert not messages.checked_blocks_of(grid.contexts[joined[0]].state, {**key, "plan_fingerprint": "0" * 64})


def test_a_node_refuses_a_session_whose_version_mechanism_or_block_is_not_its_own_plans(tmp_path):
    from flwr.app import Message

    from trainer.strategies import RoundContext
    from trainer.units.client.discrete import rotation_seed

    plan = skellam_plan(dropout_rate=0.0)
    dim = plan.scenario.model_dim
    grid, engine, _ = skellam_grid(plan, tmp_path, dim)
    _, outcome = engine.run(RoundContext(0, 0, seed=0), torch.zeros(dim))
    assert sum(outcome.survived.values()) > 0 and not outcome.aborted_pools
    sent = next(m for m in grid.delivered if m.metadata.message_type == messages.KEYS)
    node = sent.metadata.dst_node_id
    session = messages.session_of(sent.content)
    block = plan.pool(session.pool_id).discrete
    assert session.discrete is not None and session.params.modulus_bits == block.bits

    # round 1's session as the server would state it: the block, and that round's rotation seed
    index = [p.id for p in plan.pools].index(session.pool_id)
    assert session.discrete is not None
    stated = replace(session.discrete, rotation_seed=rotation_seed(RoundContext(1, 1, seed=0), index))
    next_round = messages.Session(**{**session.__dict__, "global_round": 1, "discrete": stated})

    def refusal(record_change: dict[str, Any], drop: tuple[str, ...] = ()) -> str:
        record = messages.session_record(next_round)
        for key in drop:
            del record[key]
        record.update(record_change)
        content = messages.keys_request(session, torch.zeros(dim).numpy())
        content[messages.SESSION] = record
        reply = list(grid.send_and_receive([Message(content, node, messages.KEYS)]))[0]
        assert reply.has_error(), record_change
        return str(reply.error.reason)

    assert f"bit width {block.bits + 1} (the plan's is {block.bits})" in refusal({"modulus_bits": block.bits + 1})
    assert "discrete scale" in refusal({"discrete_scale": block.scale * 2})
    assert "share variance" in refusal({"share_variance": block.share_variance / 2})
    assert "rotation seed 5 (this node derives" in refusal({"rotation_seed": "5"})
    assert "no discrete block" in refusal({"encoding": "fixed_point"})
    reason = refusal({"secagg_mechanism": "gaussian_continuous"})
    assert "noise mechanism gaussian_continuous (this node's run config says skellam)" in reason
    # a session of a server that states no version is version 1 (ChaCha20 masks): refused
    assert f"protocol version 1 (this node speaks {messages.PROTOCOL_VERSION})" in refusal({}, drop=("protocol_version",))
    # the node's own session, stated as the server sent it, is accepted
    accepted = messages.keys_request(next_round, torch.zeros(dim).numpy())
    assert not list(grid.send_and_receive([Message(accepted, node, messages.KEYS)]))[0].has_error()


def test_a_node_of_another_protocol_version_or_mechanism_is_left_out_with_the_reason(tmp_path):
    from trainer.strategies import RoundContext

    plan = skellam_plan(dropout_rate=0.0)
    dim = plan.scenario.model_dim

    class Mixed(OldNodes):
        old = frozenset({1000})

    grid, engine, log = skellam_grid(plan, tmp_path, dim, Mixed)
    # node 1001's run config names the continuous mechanism (the run's is skellam)
    grid.contexts[1001].run_config = {**grid.contexts[1001].run_config, "secagg-mechanism": "gaussian_continuous"}
    _, outcome = engine.run(RoundContext(0, 0, seed=0), torch.zeros(dim))
    excluded = engine.membership.excluded
    assert set(excluded) == {1000, 1001}
    assert excluded[1000].startswith(f"speaks secure-aggregation protocol v1 (chacha20 masks), this server "
                                     f"v{messages.PROTOCOL_VERSION} (aes-128-ctr masks)")
    assert excluded[1001].startswith("runs the noise mechanism gaussian_continuous, this run skellam")
    assert "node 1000 left out: speaks secure-aggregation protocol v1" in "\n".join(log)
    # the others run the round; the two left out are asked nothing more
    assert sum(outcome.survived.values()) > 0
    keys_to = {m.metadata.dst_node_id for m in grid.delivered if m.metadata.message_type == messages.KEYS}
    assert keys_to and not keys_to & {1000, 1001}


class _EngineBuilt(Exception):
    """Raised by the engine hook below: the ServerApp's run stops once its first engine is built."""


@pytest.mark.parametrize("start", ["plan", "resume"])
def test_the_serverapp_composes_an_old_skellam_plans_full_run_ledgers_once(tmp_path, monkeypatch, start):
    """The old plan's blocks are an earlier calibration's: planner.verify's step 6 and the check of each
    block's own noise (trainer.units.client.discrete) both need every member's full-run Skellam ledger.
    The ServerApp hands the figures verification composed to its engine factory, as gdpfed train hands
    them to its first engine, so each is composed once (twice before) up to the first FlowerRoundEngine,
    for a new run and for the resume of the run written at 99ba0bd (docs/ledger.md §5)."""
    import json
    import shutil

    from tests.trainer.old_skellam import OLD_SKELLAM_PLAN, OLD_SKELLAM_RUN, full_run_ledgers

    out = tmp_path / "run"
    if start == "resume":
        shutil.copytree(OLD_SKELLAM_RUN, out)
        plan_path = out / "plan.json"
        run_config = TrainConfig.model_validate_json((out / "config.json").read_text())
    else:
        plan_path = OLD_SKELLAM_PLAN
        run_config = TrainConfig(dataset="digits", model="mlp", model_options={"hidden": [16]}, rounds=1,
                                 local_steps=2, batch_size=8)
    document = json.loads(plan_path.read_text())
    flat = run_config_of(FlowerOptions.model_validate({"out-dir": str(out), "resume": start == "resume"}), run_config)
    grid = LoopbackGrid(build_client_app(write_plan_bundle(tmp_path / "bundle", skellam_plan(0.0))), {}, flat)
    counts = full_run_ledgers(monkeypatch, plan_path)
    built: list[Any] = []

    def stop(engine: Any) -> None:
        built.append(engine)
        raise _EngineBuilt

    with pytest.raises(_EngineBuilt):
        run_plan(grid, document, flat, engine_hook=stop, log=lambda _text: None)
    assert len(built) == 1 and built[0].discrete and any(pool.own_noise for pool in built[0].discrete.values())
    assert counts and counts == dict.fromkeys(counts, 1), counts
