"""Silo plans (MR-MTL and the IFCA warm start) on Flower: one node per silo running its own
DP-SGD, the server forming the mean, the anchors and the per-silo ledger (docs/flower.md §9).

The loopback runs use the real ClientApp and ServerApp in one process (``LoopbackGrid``).
Each silo node computes its DP-SGD alone, so its matrix products have one silo's shape
where ``gdpfed train`` batches all silos: the parameters agree to float32 rounding, not
bit for bit, while the ledger, the rounds, who trained and the draws (masks, noise,
selections) are the simulator's exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from accounting.errors import InvalidInputError
from planner.units import make_plan
from planner.units.silo_sample import SiloSamplePlan, SiloScenario
from tests.trainer.flower.conftest import write_plan_bundle
from tests.trainer.trainer_plans import interrupt_after, quiet_progress
from trainer.data.silos import load_silo_data
from trainer.flower.client_app import build_client_app
from trainer.flower.server_app import run_plan
from trainer.flower.settings import FlowerOptions, run_config_of
from trainer.flower.silo import SILO_TRAIN
from trainer.flower.testing import LoopbackGrid
from trainer.run.checkpoint import load_checkpoint
from trainer.run.metrics import read_rounds
from trainer.runner import TrainConfig, execute_run, prepare_run

ROUNDS = 3


def silo_plan(method: str, sizes: list[int]) -> SiloSamplePlan:
    scenario = SiloScenario.model_validate({
        "silos": [{"id": f"s{k}", "num_samples": n, "epsilon": 2.0} for k, n in enumerate(sizes)],
        "delta": 1e-5, "rounds": ROUNDS, "batch_size": 10, "clip_norm": 1.0, "accountant": "rdp",
    })
    plan = make_plan(scenario, method)
    assert isinstance(plan, SiloSamplePlan)
    return plan


def silo_config(**overrides: Any) -> TrainConfig:
    return TrainConfig.model_validate({"dataset": "rotated_digits", "model": "mlp", "model_options": {"hidden": []},
                                       "rounds": ROUNDS, "lr": 0.1, "eval_every": 1,
                                       "strategy_options": {"prox": 0.5}, **overrides})


def simulation_nodes(plan: SiloSamplePlan) -> dict[int, dict[str, Any]]:
    # node 1000 + k is silo k, drawing its masks and noise from the run seed as gdpfed train does
    return {1000 + k: {"partition-id": k, "gdpfed-simulation": True} for k in range(len(plan.silos))}


def compare_runs(sim: Path, flower: Path, sim_summary: Any, flower_summary: Any, *, rounds: int = ROUNDS) -> None:
    """Same rounds, ledger and who trained; metrics and parameters equal to float32 rounding."""
    sim_rounds, flower_rounds = read_rounds(sim / "rounds.jsonl"), read_rounds(flower / "rounds.jsonl")
    assert [r.round for r in flower_rounds] == [r.round for r in sim_rounds] == list(range(rounds))
    for mine, theirs in zip(flower_rounds, sim_rounds, strict=True):
        assert mine.epsilon_spent == theirs.epsilon_spent  # the per-silo ledger: exactly the simulator's
        assert (mine.sampled, mine.survived, mine.privacy_unit) == (theirs.sampled, theirs.survived, theirs.privacy_unit)
        assert mine.loss == pytest.approx(theirs.loss, rel=1e-4)
        assert mine.accuracy == pytest.approx(theirs.accuracy, abs=0.02)
    assert flower_summary.epsilon_spent == sim_summary.epsilon_spent
    assert flower_summary.privacy_unit == sim_summary.privacy_unit == "silo_sample"
    mine_state = load_checkpoint(flower / "checkpoint.pt")
    theirs_state = load_checkpoint(sim / "checkpoint.pt")
    assert torch.allclose(mine_state["global_params"], theirs_state["global_params"], atol=1e-5)
    assert torch.allclose(mine_state["strategy"]["personal"], theirs_state["strategy"]["personal"], atol=1e-5)


@pytest.mark.parametrize(("method", "sizes"), [("mrmtl", [20, 30, 25]), ("ifca_mrmtl", [20, 20, 20, 20])])
def test_silo_run_on_flower_equals_gdpfed_train_and_resumes(method: str, sizes: list[int], tmp_path: Path) -> None:
    plan = silo_plan(method, sizes)
    document = plan.model_dump(mode="json")
    data = load_silo_data("rotated_digits", sizes, seed=0)
    simulated = execute_run(prepare_run(plan, document, silo_config(), tmp_path / "sim", dataset=data),
                            progress=quiet_progress(ROUNDS))

    run_config = run_config_of(FlowerOptions.model_validate({"out-dir": str(tmp_path / "flower")}), silo_config())
    grid = LoopbackGrid(build_client_app(write_plan_bundle(tmp_path / "bundle", plan)), simulation_nodes(plan), run_config)
    with pytest.raises(KeyboardInterrupt):
        run_plan(grid, document, run_config, dataset=data, progress=interrupt_after(ROUNDS, 1))
    resumed = run_plan(grid, document, {**run_config, "resume": True}, dataset=data, progress=quiet_progress(ROUNDS))

    assert resumed.complete and resumed.rounds_run == ROUNDS
    compare_runs(tmp_path / "sim", tmp_path / "flower", simulated, resumed)
    for silo in plan.silos:  # after the plan's rounds each silo has spent what the plan planned, within its budget
        assert resumed.epsilon_spent[silo.id] == pytest.approx(silo.epsilon_planned, rel=1e-6)
        assert resumed.epsilon_spent[silo.id] <= silo.epsilon
    passes = [m for m in grid.delivered if m.metadata.message_type == SILO_TRAIN]
    assert len(passes) == ROUNDS * len(sizes)  # each silo's pass on its own node, once per round
    if method == "ifca_mrmtl":
        selections = [m for m in grid.delivered if m.metadata.message_type.endswith("gdpfed_silo_select")]
        assert len(selections) == plan.silos[0].selection_rounds * len(sizes) > 0


def test_a_node_runs_each_pass_once_and_only_the_plans_rounds(tmp_path: Path) -> None:
    """Sent a pass it already ran, or a round beyond the plan's, a silo node refuses: it would spend
    privacy the plan did not count. Its noise is its own unless it is a simulation node."""
    from flwr.app import Array, ArrayRecord, ConfigRecord, Context, RecordDict

    from trainer.flower.silo import REQUEST, ROWS, SiloNode
    from trainer.run.directory import fingerprint

    plan = silo_plan("mrmtl", [20, 20])
    bundle = write_plan_bundle(tmp_path / "bundle", plan)
    run_config = run_config_of(FlowerOptions.model_validate({"out-dir": str(tmp_path / "run")}), silo_config())
    node = SiloNode(bundle)
    dim = 64 * 10 + 10
    start = np.zeros(dim, dtype=np.float32)

    def request(global_round: int, pass_index: int = 0) -> RecordDict:
        return RecordDict({
            REQUEST: ConfigRecord({"plan_fingerprint": fingerprint(plan.model_dump(mode="json")),
                                   "global_round": global_round, "pass_index": pass_index, "prox": 0.0}),
            ROWS: ArrayRecord({"start": Array(start)}),
        })

    def trained(context: Context, content: RecordDict) -> np.ndarray:
        return np.asarray(node.train(content, context).array_records[ROWS]["trained"].numpy())

    deployed = Context(1, 7, {"gdpfed-silo": "s1", "partition-id": 1}, RecordDict(), run_config)
    first = trained(deployed, request(0))
    with pytest.raises(Exception, match="already ran pass 0 of round 0"):
        node.train(request(0), deployed)
    with pytest.raises(Exception, match="outside the plan's rounds"):
        node.train(request(ROUNDS), deployed)
    # a deployed node's noise is secret: another node of the same silo draws other noise
    again = Context(1, 8, {"gdpfed-silo": "s1", "partition-id": 1}, RecordDict(), run_config)
    assert not np.array_equal(trained(again, request(0)), first)
    # a simulation node draws the run seed's: twice the same
    sims = [Context(1, 9 + i, {"partition-id": 1, "gdpfed-simulation": True}, RecordDict(), run_config) for i in range(2)]
    assert np.array_equal(trained(sims[0], request(0)), trained(sims[1], request(0)))
    with pytest.raises(InvalidInputError, match="gdpfed-silo"):
        node.train(request(1), Context(1, 11, {"partition-id": 1}, RecordDict(), run_config))


def test_a_unit_without_flower_support_is_refused_by_name_before_anything_is_written(tmp_path: Path, monkeypatch) -> None:
    from trainer.flower import server_app

    monkeypatch.delitem(server_app.FLOWER_MECHANISMS, "dpsgd_silo")
    plan = silo_plan("mrmtl", [20, 20])
    run_config = run_config_of(FlowerOptions.model_validate({"out-dir": str(tmp_path / "run")}), silo_config())
    grid = LoopbackGrid(build_client_app(write_plan_bundle(tmp_path / "bundle", plan)), {}, run_config)
    with pytest.raises(InvalidInputError) as error:
        run_plan(grid, json.loads(json.dumps(plan.model_dump(mode="json"))), run_config)
    assert error.value.field == "privacy_unit" and "silo_sample" in str(error.value)
    assert not (tmp_path / "run").exists()


def test_a_re_plan_stops_a_flower_silo_run_instead_of_training_on_the_servers_copy(tmp_path: Path) -> None:
    """``switch_plan`` (the service re-planned) rebuilds the run's engine for the successor: on
    Flower that stops the run as a client run's does, since the silos' nodes hold the old plan
    (their passes would use the old sigma_k while the ledger counts the successor's)."""
    from trainer.flower.server_app import prepare_silo_run
    from trainer.run.replan import switch_plan
    from trainer.run.reporting import ReportingStoppedError

    plan = silo_plan("mrmtl", [20, 20])
    document = json.loads(json.dumps(plan.model_dump(mode="json")))
    options = FlowerOptions.model_validate({"out-dir": str(tmp_path / "run")})
    run_config = run_config_of(options, silo_config())
    grid = LoopbackGrid(build_client_app(write_plan_bundle(tmp_path / "bundle", plan)), simulation_nodes(plan), run_config)
    prepared, _ = prepare_silo_run(grid, plan, document, silo_config(), tmp_path / "run", options,
                                   dataset=load_silo_data("rotated_digits", [20, 20], seed=0))
    engine = prepared.engine
    tally = prepared.unit.steps.open_tally(prepared, None)
    with pytest.raises(ReportingStoppedError, match="carry the old plan in their app bundle"):
        switch_plan(prepared, tally, {**document, "id": "successor"}, 0)
    assert prepared.engine is engine and prepared.plan is plan  # nothing of the successor's was taken up


def test_a_silo_plan_stating_less_than_its_ledger_runs_on_flower_as_in_gdpfed_train(tmp_path: Path) -> None:
    """docs/mrmtl.md §2: a silo plan whose stated figure is below its ledger (one an earlier
    release wrote) runs with the run's warning, its nodes included (they check the budgets, not
    the stated figures)."""
    sizes = [20, 25]
    document = silo_plan("mrmtl", sizes).model_dump(mode="json")
    counted = document["silos"][0]["epsilon_planned"]
    document["silos"][0]["epsilon_planned"] = counted / 2
    plan = SiloSamplePlan.model_validate(document)
    data = load_silo_data("rotated_digits", sizes, seed=0)
    config = silo_config(rounds=1)
    run_config = run_config_of(FlowerOptions.model_validate({"out-dir": str(tmp_path / "flower")}), config)
    grid = LoopbackGrid(build_client_app(write_plan_bundle(tmp_path / "bundle", plan)), simulation_nodes(plan), run_config)
    summary = run_plan(grid, document, run_config, dataset=data, progress=quiet_progress(1))
    assert summary.complete and summary.rounds_run == 1
    assert any("below what its dpsgd_silo run spends" in warning for warning in summary.warnings)
    # each node trained its pass: none refused the plan
    assert [(r.round, r.survived) for r in read_rounds(tmp_path / "flower" / "rounds.jsonl")] == [(0, {"silos": 2})]
