"""Silo plans on real Flower processes: flower-superlink, one flower-supernode per silo, `flwr run`.

The short version (`gdpfed flower local`, 2 silos, one round) runs in CI: the run completes
and its per-silo ledger is `gdpfed train`'s. The long one (3 silos, IFCA-MR-MTL over two
rounds, nodes drawing from the run seed) is marked slow and runs with GDPFED_FULL=1: its
rounds and metrics are also `gdpfed train`'s, to float32 rounding (tests/trainer/flower/test_silo.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from app import cli as app_cli
from tests.trainer.flower.test_silo import compare_runs, silo_config, silo_plan
from tests.trainer.trainer_plans import quiet_progress
from trainer.data.silos import load_silo_data
from trainer.flower.cli import simulation_nodes
from trainer.flower.local import LocalFederation
from trainer.run.metrics import read_rounds
from trainer.run.summary import RunSummary
from trainer.runner import execute_run, prepare_run

APP_OPTIONS = ["--dataset", "rotated_digits", "--model", "mlp", "--model-option", "hidden=[]", "--lr", "0.1",
               "--eval-every", "1", "--strategy-option", "prox=0.5"]


def write_app(tmp_path: Path, method: str, sizes: list[int], rounds: int, capsys: Any) -> tuple[Any, dict[str, Any]]:
    plan = silo_plan(method, sizes)
    document = plan.model_dump(mode="json")
    (tmp_path / "plan.json").write_text(json.dumps(document))
    code = app_cli.run(["flower", "app", "--plan", str(tmp_path / "plan.json"), *APP_OPTIONS, "--rounds", str(rounds),
                        "--out", str(tmp_path / "app"), "--run-dir", str(tmp_path / "run"), "--step-timeout", "600"])
    assert code == 0, capsys.readouterr().err
    return plan, document


def simulate(plan: Any, document: dict[str, Any], sizes: list[int], rounds: int, out: Path) -> RunSummary:
    data = load_silo_data("rotated_digits", sizes, seed=0)
    config = silo_config(rounds=rounds)
    return execute_run(prepare_run(plan, document, config, out, dataset=data), progress=quiet_progress(rounds))


def test_gdpfed_flower_local_runs_a_silo_plan_with_gdpfed_trains_ledger(tmp_path: Path, capsys: Any) -> None:
    sizes = [20, 25]
    plan, document = write_app(tmp_path, "mrmtl", sizes, 1, capsys)
    capsys.readouterr()
    code = app_cli.run(["flower", "local", str(tmp_path / "app"), "--work", str(tmp_path / "flower"), "--json",
                        "--timeout", "1200"])
    out = capsys.readouterr()
    log = (tmp_path / "flower" / "flwr-run.log").read_text(errors="replace") if code else ""
    assert code == 0, out.err + log[-3000:]
    summary = RunSummary.model_validate_json(out.out)
    assert summary.complete and summary.rounds_run == 1 and summary.privacy_unit == "silo_sample"
    records = read_rounds(tmp_path / "run" / "rounds.jsonl")
    assert [(r.round, r.survived) for r in records] == [(0, {"silos": 2})]  # both silos trained on their nodes
    simulated = simulate(plan, document, sizes, 1, tmp_path / "sim")
    assert summary.epsilon_spent == simulated.epsilon_spent  # the per-silo ledger, exactly
    assert records[0].epsilon_spent == read_rounds(tmp_path / "sim" / "rounds.jsonl")[0].epsilon_spent


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.skipif(not os.environ.get("GDPFED_FULL"), reason="long real-process run: set GDPFED_FULL=1")
def test_real_processes_run_ifca_mrmtl_as_gdpfed_train_does(tmp_path: Path, capsys: Any) -> None:
    sizes, rounds = [20, 20, 20], 2
    plan, document = write_app(tmp_path, "ifca_mrmtl", sizes, rounds, capsys)
    # simulation nodes: each silo draws its masks, noise and selections from the run seed, as gdpfed train
    nodes = [{**node, "gdpfed-simulation": True} for node in simulation_nodes(plan, None, 0)]
    with LocalFederation(tmp_path / "flower", nodes) as federation:
        code = federation.run(tmp_path / "app", {"min-nodes": str(len(nodes))}, timeout_s=3300)
        started = [p.pid for p in federation.processes]
    assert code == 0, (tmp_path / "flower" / "flwr-run.log").read_text(errors="replace")[-3000:]
    for pid in started:  # every process we started is gone
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    flower = RunSummary.model_validate(json.loads((tmp_path / "run" / "summary.json").read_text()))
    simulated = simulate(plan, document, sizes, rounds, tmp_path / "sim")
    compare_runs(tmp_path / "sim", tmp_path / "run", simulated, flower, rounds=rounds)
