"""FedHDP on Flower equals `gdpfed train`: ratios, Ditto personal models kept on the nodes, adaptive clipping.

(docs/flower.md §2, "Per-client state".) Each node keeps its client's personal model in its
``Context.state`` (the in-process grid serialises it between messages, as a deployment's
new ClientApp process per message would need); the server aggregates the pools with the
ratios r, runs adaptive clipping with the count coordinate inside secure aggregation, and
asks the nodes for their personal models' scores on their own test rows.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.trainer.flower.conftest import write_plan_bundle
from tests.trainer.test_adaptive_clip import with_adaptive_clip
from tests.trainer.trainer_plans import comparable, hand_plan, interrupt_after, quiet_progress
from trainer.flower import messages
from trainer.flower.client_app import build_client_app
from trainer.flower.server_app import run_plan
from trainer.flower.settings import FlowerOptions, run_config_of
from trainer.flower.testing import LoopbackGrid
from trainer.run.checkpoint import load_checkpoint
from trainer.run.metrics import read_rounds
from trainer.runner import TrainConfig, execute_run, prepare_run

ROUNDS = 3
CLIENTS = 14
OPTIONS = {"ratios": {"P1": 0.3}, "lambdas": {"private": 0.1, "out": 0.02}, "adaptive_clip": True}


@pytest.fixture(scope="module")
def plan():
    # 10 private clients and 4 opted out; the private pool needs 2 survivors, adaptive clipping on
    return with_adaptive_clip(hand_plan(
        [("private", 3.0, 10, 0.6), ("out", None, 4, 0.5)],
        [("P1", ["private"], 1.0, 2, 1.0), ("P2", ["out"], 0.0, 1, 1.0)],
        rounds=ROUNDS, model_dim=700, method="gdpfed",
    ), count_noise_std=2.0, learning_rate=0.5)


@pytest.fixture(scope="module")
def data():
    from trainer.data import load_dataset

    return load_dataset("digits", num_clients=CLIENTS, partition="one_label", seed=0, client_test_fraction=0.25)


def config(**overrides) -> TrainConfig:
    base = dict(dataset="digits", model="mlp", model_options={"hidden": [10]}, rounds=ROUNDS, local_steps=2, lr=0.1,
                batch_size=8, partition="one_label", dataset_options={"client_test_fraction": 0.25}, eval_every=1,
                engine="loop", strategy="fedhdp", strategy_options=OPTIONS)
    base.update(overrides)
    return TrainConfig(**base)


def test_fedhdp_on_flower_equals_gdpfed_train_with_personal_models_on_the_nodes(plan, data, tmp_path):
    document = plan.model_dump(mode="json")
    simulated = execute_run(prepare_run(plan, document, config(), tmp_path / "sim", dataset=data),
                            progress=quiet_progress(ROUNDS))

    run_config = run_config_of(FlowerOptions.model_validate({"out-dir": str(tmp_path / "flower")}), config())
    nodes = {1000 + i: {"partition-id": i, "gdpfed-simulation": True} for i in range(CLIENTS)}
    grid = LoopbackGrid(build_client_app(write_plan_bundle(tmp_path / "bundle", plan)), nodes, run_config)
    servers = []
    with pytest.raises(KeyboardInterrupt):
        run_plan(grid, document, run_config, dataset=data, progress=interrupt_after(ROUNDS, 1),
                 engine_hook=servers.append)
    resumed = run_plan(grid, document, {**run_config, "resume": True}, dataset=data,
                       progress=quiet_progress(ROUNDS), engine_hook=servers.append)

    assert resumed.complete and resumed.rounds_run == ROUNDS
    flower_rounds = read_rounds(tmp_path / "flower" / "rounds.jsonl")
    simulated_rounds = read_rounds(tmp_path / "sim" / "rounds.jsonl")
    # the same ledger (per-round epsilons), pools, clip norms S^t, counts and personal accuracies
    assert comparable(flower_rounds) == comparable(simulated_rounds)
    assert torch.equal(load_checkpoint(tmp_path / "flower" / "checkpoint.pt")["global_params"],
                       load_checkpoint(tmp_path / "sim" / "checkpoint.pt")["global_params"])
    # the summary's ledger and metrics (global, per group, personal per group)
    same = ("epsilon_spent", "epsilon_rdp", "epsilon_tight", "aborted_rounds", "final_accuracy", "final_loss",
            "final_metrics", "accuracy_by_group", "personal_accuracy_by_group", "personal_accuracy", "rounds_run")
    assert resumed.model_dump(include=set(same)) == simulated.model_dump(include=set(same))
    assert resumed.personal_accuracy is not None and None not in (resumed.personal_accuracy_by_group or {None: None}).values()

    # adaptive clipping moved S^t, from released counts
    clips = [r.clip_norm for r in flower_rounds]
    assert None not in clips and len(set(clips)) > 1
    assert all(r.unclipped_fraction is not None for r in flower_rounds if not r.aborted_pools)
    # the personal accuracies come from the nodes: the server's strategy holds no personal model,
    # the nodes that trained keep theirs in their Context.state
    assert all(not engine.strategy.personal for engine in servers)
    trained = {n for n, c in grid.contexts.items() if messages.CLIENT_STATE in c.state}
    assert trained and trained <= set(nodes)
    sampled_ever = sum(sum(r.sampled.values()) for r in flower_rounds)
    assert sampled_ever >= len(trained)


def test_a_node_that_keeps_its_scores_to_itself_is_left_out_of_the_personal_means(plan, data, tmp_path):
    run_config = run_config_of(FlowerOptions.model_validate({"out-dir": str(tmp_path / "flower")}),
                               config(rounds=1, strategy_options={"ratios": {"P1": 0.3}}))
    quiet = {1000 + i: {"partition-id": i, "gdpfed-simulation": True, "gdpfed-personal-metrics": "false"}
             for i in range(CLIENTS)}
    grid = LoopbackGrid(build_client_app(write_plan_bundle(tmp_path / "bundle", plan)), quiet, run_config)
    summary = run_plan(grid, plan.model_dump(mode="json"), run_config, dataset=data, progress=quiet_progress(1))
    # every node refused: no personal accuracy at all, and the run goes on (the global model's is there)
    assert summary.complete and not any(k.startswith("personal_accuracy") for k in summary.final_metrics or {})
    refused = [m for m in grid.received if m.metadata.message_type == messages.PERSONAL]
    assert refused and all(m.has_error() for m in refused)


def test_the_node_derives_adaptive_noise_from_its_own_plan(plan):
    """A session's S^t scales the clip and the update's noise together: the noise multiplier
    stays the plan's sigma_Delta whatever S^t the server names, and a plan without an
    adaptive_clip block is refused."""
    from accounting.errors import InvalidInputError
    from trainer.flower.client_app import NodeClient

    small = NodeClient.mechanism(plan, "P1", 700, 0.01)
    large = NodeClient.mechanism(plan, "P1", 700, 10.0)
    assert small.clip_norms == {"private": 0.01} and large.clip_norms == {"private": 10.0}
    assert small.share_std / 0.01 == pytest.approx(large.share_std / 10.0)
    assert small.update_noise_multiplier == large.update_noise_multiplier > 0
    fixed = plan.model_copy(update={"scenario": plan.scenario.model_copy(update={"adaptive_clip": None})})
    with pytest.raises(InvalidInputError):
        NodeClient.mechanism(fixed, "P1", 700, 1.0)
    assert np.isfinite(small.value_bound)


def test_a_session_with_a_bad_clip_or_another_grid_at_it_is_refused(plan):
    from trainer.flower.client_app import NodeClient
    from trainer.secagg import ProtocolError, choose_params

    node_side = NodeClient.mechanism(plan, "P1", 700, 0.5)
    params = choose_params(2, node_side.threshold, node_side.value_bound, scale=node_side.scale,
                           protocol_version=messages.PROTOCOL_VERSION)
    session = messages.Session("P1", 0, "f", b"s" * 32, (1, 2), params, {0: (1,), 1: (0,)}, clip_norm=0.5)
    NodeClient.check_params(session, node_side)  # the node's own mechanism at S^t: accepted
    record = messages.session_record(session)
    assert messages.session_from_record(record).clip_norm == 0.5
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        record["clip_norm"] = bad
        with pytest.raises(ProtocolError, match="clip norm"):
            messages.session_from_record(record)
    # a grid or bound computed at another clip than the session names is refused
    with pytest.raises(ProtocolError, match="value bound|grid scale"):
        NodeClient.check_params(session, NodeClient.mechanism(plan, "P1", 700, 5.0))
