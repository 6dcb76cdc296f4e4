"""The Flower benchmark's split of a round (process start, setup, training, protocol, transport)."""

from __future__ import annotations

import pytest

from bench.flower import step_breakdown


def line(step, start, loaded, begin, end, **extra):
    return {"step": f"train.gdpfed_{step}", "process_start": start, "module_loaded": loaded,
            "handler_start": begin, "handler_end": end, **extra}


def test_step_breakdown_splits_each_step_into_its_parts():
    records = [
        # KEYS: two nodes; process start 2 s and 3 s, setup 1.5 s, training 0.5 s, protocol 0.25 s
        line("keys", 0.0, 2.0, 2.0, 4.25, setup_s=1.5, train_s=0.5),
        line("keys", 0.0, 3.0, 3.0, 5.25, setup_s=1.5, train_s=0.5),
        # SHARES: one node, 1 s to start, 0.5 s of protocol work
        line("shares", 10.0, 11.0, 11.0, 11.5),
        line("hello", 0.0, 1.0, 1.0, 2.0),  # not a protocol step: ignored
    ]
    totals = step_breakdown(records, {"keys": 8.0, "shares": 4.0, "masked": 0.0, "unmask": 0.0})
    assert totals["process_start_s"] == pytest.approx(2.5 + 1.0)
    assert totals["setup_s"] == pytest.approx(1.5) and totals["train_s"] == pytest.approx(0.5)
    assert totals["protocol_s"] == pytest.approx(0.25 + 0.5)
    # transport: the step's wall time less its slowest process (8 - 5.25, 4 - 1.5)
    assert totals["transport_s"] == pytest.approx(2.75 + 2.5)


def test_the_plain_fedavg_peer_trains_the_sampled_nodes_and_averages_their_models(tmp_path):
    """The peer is Flower's FedAvg on the same nodes: one train message per sampled node, the
    node's model and an example count of 1 back, and the new global model their plain mean."""
    import numpy as np
    from flwr.serverapp.strategy import FedAvg

    from bench.flower import _fedavg_sample, _plan
    from bench.flower_fedavg import build_client_app, run_fedavg, write_fedavg_bundle
    from trainer.flower.cli import simulation_nodes
    from trainer.flower.settings import FlowerOptions, run_config_of
    from trainer.flower.testing import LoopbackGrid
    from trainer.runner import TrainConfig

    plan = _plan(6, 4.0, 1)
    config = TrainConfig(dataset="digits", model="mlp", model_options={"hidden": [8]}, rounds=1, local_steps=1,
                         batch_size=8, engine="loop")
    run_config = run_config_of(FlowerOptions.model_validate({"out-dir": str(tmp_path / "run")}), config)
    write_fedavg_bundle(tmp_path / "app", plan.model_dump(mode="json"), run_config)
    nodes = simulation_nodes(plan, None, 0)
    grid = LoopbackGrid(build_client_app(tmp_path / "app"), {1 + i: n for i, n in enumerate(nodes)}, run_config)
    released = []
    real_aggregate = FedAvg.aggregate_train

    def spy(self, server_round, replies):
        arrays, metrics = real_aggregate(self, server_round, list(replies))
        released.append(arrays)
        return arrays, metrics

    FedAvg.aggregate_train = spy  # type: ignore[method-assign]
    try:
        seconds = run_fedavg(grid, plan.model_dump(mode="json"), run_config)
    finally:
        FedAvg.aggregate_train = real_aggregate  # type: ignore[method-assign]
    assert len(seconds) == 1 and seconds[0] > 0
    replies = [m for m in grid.received if m.metadata.message_type == "train"]
    assert len(replies) == _fedavg_sample(plan) == 4
    models = []
    for reply in replies:
        assert dict(reply.content.metric_records["metrics"]) == {"num-examples": 1}
        models.append(reply.content.array_records["arrays"].to_numpy_ndarrays()[0])
    assert released[0] is not None
    assert np.allclose(released[0].to_numpy_ndarrays()[0], np.mean(models, axis=0))


def test_the_fedhdp_rows_time_gdpfed_train_and_loopback_with_the_nodes_scoring_their_personal_models():
    from bench.flower import measure_fedhdp

    simulated, loopback = measure_fedhdp(4, 4.0, 1)
    assert simulated["executor"] == "gdpfed train fedhdp" and loopback["executor"] == "flower loopback fedhdp"
    assert simulated["vs_train"] == 1 and loopback["vs_train"] > 0
    assert simulated["clients_per_round"] == loopback["clients_per_round"] > 0
    assert loopback["personal_eval_s"] > 0  # every node scored its own model, in this process
