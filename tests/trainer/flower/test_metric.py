"""Metric plans (local Laplace releases, IFCA) on Flower: each selected client releases its
own noised model from its node; the server runs k-means, caps participation and keeps the
leakage ledger (docs/flower.md §10). Over ``LoopbackGrid`` with simulation nodes a run is
``gdpfed train``'s bit for bit: rounds (with every leakage figure), hypotheses, ledger."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from planner.units.metric_local import MetricPlan, MetricScenario, plan_metric
from tests.trainer.flower.conftest import write_plan_bundle
from tests.trainer.trainer_plans import comparable, interrupt_after, quiet_progress
from trainer.data.metric_synthetic import load_metric_synthetic
from trainer.flower.client_app import build_client_app
from trainer.flower.metric import METRIC_RELEASE
from trainer.flower.server_app import run_plan
from trainer.flower.settings import FlowerOptions, run_config_of
from trainer.flower.testing import LoopbackGrid
from trainer.run.checkpoint import load_checkpoint
from trainer.run.metrics import read_rounds
from trainer.runner import TrainConfig, execute_run, prepare_run

ROUNDS = 3
CLIENTS = 20


def metric_plan(rule: str, *, budget: float = 10.0) -> MetricPlan:
    radius = None if rule == "own_update" else 0.05
    return plan_metric(MetricScenario.model_validate({
        "groups": [{"id": "all", "num_clients": CLIENTS, "noise_multiplier": 5.0, "leakage_budget": budget}],
        "rounds": ROUNDS, "model_dim": 2, "clients_per_round": 7, "hypotheses": 2, "radius_rule": rule,
        "radius": radius, "min_radius": 0.01 if rule == "previous_round" else None,
    }))


def metric_config(**overrides: Any) -> TrainConfig:
    return TrainConfig.model_validate({
        "dataset": "metric_synthetic", "partition": "natural", "model": "mlp",
        "model_options": {"hidden": [], "bias": False}, "local_steps": 1, "batch_size": 10, "lr": 0.1,
        "rounds": ROUNDS, "eval_every": 1, "strategy": "metric_ifca", "engine": "loop", **overrides})


def simulation_nodes() -> dict[int, dict[str, Any]]:
    # node 500 + i is client i, dealt into its group and drawing its noise as gdpfed train does
    return {500 + i: {"partition-id": i, "gdpfed-simulation": True} for i in range(CLIENTS)}


def run_both(plan: MetricPlan, tmp_path: Path, *, interrupt: bool = True) -> tuple[Any, Any, LoopbackGrid]:
    document = plan.model_dump(mode="json")
    data = load_metric_synthetic(num_clients=CLIENTS, seed=0)
    simulated = execute_run(prepare_run(plan, document, metric_config(), tmp_path / "sim", dataset=data),
                            progress=quiet_progress(ROUNDS))
    run_config = run_config_of(FlowerOptions.model_validate({"out-dir": str(tmp_path / "flower")}), metric_config())
    grid = LoopbackGrid(build_client_app(write_plan_bundle(tmp_path / "bundle", plan)), simulation_nodes(), run_config)
    if interrupt:
        with pytest.raises(KeyboardInterrupt):
            run_plan(grid, document, run_config, dataset=data, progress=interrupt_after(ROUNDS, 1))
        run_config = {**run_config, "resume": True}
    flower = run_plan(grid, document, run_config, dataset=data, progress=quiet_progress(ROUNDS))
    return simulated, flower, grid


@pytest.mark.parametrize("rule", ["public", "previous_round", "own_update"])
def test_metric_run_on_flower_equals_gdpfed_train_and_resumes(rule: str, tmp_path: Path) -> None:
    plan = metric_plan(rule)
    simulated, flower, grid = run_both(plan, tmp_path)
    assert flower.complete and flower.rounds_run == ROUNDS and flower.privacy_unit == "metric_local"
    mine, theirs = read_rounds(tmp_path / "flower" / "rounds.jsonl"), read_rounds(tmp_path / "sim" / "rounds.jsonl")
    assert comparable(mine) == comparable(theirs)  # leakage figures, participants, metrics: all of it
    assert all(r.epsilon_spent == {} for r in mine)  # a leakage is never written as an epsilon
    assert any(k.startswith("metric_leakage") for k in mine[-1].metrics)
    assert flower.final_metrics == simulated.final_metrics and flower.epsilon_spent == {}
    assert torch.equal(load_checkpoint(tmp_path / "flower" / "checkpoint.pt")["global_params"],
                       load_checkpoint(tmp_path / "sim" / "checkpoint.pt")["global_params"])
    releases = [m for m in grid.delivered if m.metadata.message_type == METRIC_RELEASE]
    assert len(releases) == ROUNDS * 7  # one release a selected client a round, made on its node
    # what the server received from a node is its noised model only: no update, no chosen hypothesis
    for reply in (m for m in grid.received if m.metadata.message_type == METRIC_RELEASE):
        assert set(reply.content.array_records) == {"gdpfed.metric_arrays"}
        assert set(reply.content.array_records["gdpfed.metric_arrays"]) == {"released"}


def test_the_participation_cap_holds_on_the_server_and_on_the_node(tmp_path: Path) -> None:
    """A budget of one release (leakage n / nu = 0.4): 7 of 20 clients a round leaves 6
    eligible in the third round, no client releases twice, and a node asked for a second
    release refuses it by itself."""
    from flwr.app import Array, ArrayRecord, ConfigRecord, Context, RecordDict

    from trainer.flower.client_app import NodeClient
    from trainer.flower.metric import ARRAYS, RELEASES, REQUEST, MetricNode
    from trainer.run.directory import fingerprint

    plan = metric_plan("public", budget=0.4)
    assert plan.groups[0].max_participations == 1
    run_both(plan, tmp_path, interrupt=False)
    mine = read_rounds(tmp_path / "flower" / "rounds.jsonl")
    assert comparable(mine) == comparable(read_rounds(tmp_path / "sim" / "rounds.jsonl"))
    assert [r.sampled["all"] for r in mine] == [7, 7, 6]
    ledger = load_checkpoint(tmp_path / "flower" / "checkpoint.pt")["ledger"]
    assert len(ledger["participations"]) == 20 and {p for p, _ in ledger["participations"].values()} == {1}

    bundle = tmp_path / "bundle"
    node = MetricNode(bundle, NodeClient(bundle))
    run_config = run_config_of(FlowerOptions.model_validate({"out-dir": str(tmp_path / "x")}), metric_config())
    context = Context(1, 9, {"gdpfed-group": "all", "partition-id": 3}, RecordDict(), run_config)
    request = RecordDict({
        REQUEST: ConfigRecord({"plan_fingerprint": fingerprint(plan.model_dump(mode="json")), "global_round": 1}),
        ARRAYS: ArrayRecord({"params": Array(np.zeros(4, dtype=np.float32))}),
    })
    context.state[RELEASES] = ConfigRecord({"round": 0, "count": 1})
    with pytest.raises(Exception, match="cap of 1"):
        node.release(request, context)
    context.state[RELEASES] = ConfigRecord({"round": 1, "count": 0})
    with pytest.raises(Exception, match="already released in round 1"):
        node.release(request, context)
    context.state[RELEASES] = ConfigRecord({"round": 0, "count": 0})
    released = node.release(request, context).array_records[ARRAYS]["released"].numpy()
    assert released.shape == (2,)


def test_a_re_plan_stops_a_flower_metric_run_instead_of_releasing_from_the_servers_copy(tmp_path: Path) -> None:
    """``switch_plan`` (the service re-planned) rebuilds the run's engine for the successor: on
    Flower that stops the run as a client run's does, rather than building the simulator's
    engine, which would release from the server's copy of the clients' data."""
    from trainer.flower.server_app import prepare_metric_run
    from trainer.run.replan import switch_plan
    from trainer.run.reporting import ReportingStoppedError

    plan = metric_plan("public")
    document = plan.model_dump(mode="json")
    options = FlowerOptions.model_validate({"out-dir": str(tmp_path / "run")})
    run_config = run_config_of(options, metric_config())
    grid = LoopbackGrid(build_client_app(write_plan_bundle(tmp_path / "bundle", plan)), simulation_nodes(), run_config)
    prepared, _ = prepare_metric_run(grid, plan, document, metric_config(), tmp_path / "run", options,
                                     dataset=load_metric_synthetic(num_clients=CLIENTS, seed=0))
    engine = prepared.engine
    tally = prepared.unit.steps.open_tally(prepared, None)
    with pytest.raises(ReportingStoppedError, match="carry the old plan in their app bundle"):
        switch_plan(prepared, tally, {**document, "id": "successor"}, 0)
    assert prepared.engine is engine and prepared.plan is plan  # nothing of the successor's was taken up
