"""``--secagg-workers`` / ``secagg_workers``: the processes a secure-aggregation session may
fork (docs/secure-aggregation.md §Parallel), recorded and bit-identical for any count."""

from __future__ import annotations

import json

import pytest
import torch

from accounting.errors import InvalidInputError
from app import cli as app_cli
from tests.trainer.test_cli import TINY, assert_one_line_error, gdpfed, only_train, plan_file  # noqa: F401
from trainer.experiments import cell as cell_module
from trainer.experiments import runner as experiment_runner
from trainer.secagg import parallel


def test_worker_count_is_recorded_and_results_are_bit_identical(capsys, tmp_path, plan_file, monkeypatch):  # noqa: F811
    # every session forks as many workers as allowed, however small
    monkeypatch.setattr(parallel, "PARALLEL_MIN_SECONDS", 0.0)
    monkeypatch.setattr(parallel, "available_workers", lambda: 4)
    runs = {}
    for workers in ("1", "3"):
        out = tmp_path / f"w{workers}"
        code, stdout, err = gdpfed(capsys, "train", "--plan", plan_file, *TINY, "--rounds", "2",
                                   "--secagg-workers", workers, "--out", out)
        assert code == 0, err
        summary = json.loads((out / "summary.json").read_text())
        assert summary["secagg_workers"] == int(workers)
        assert json.loads((out / "config.json").read_text())["secagg_workers"] == int(workers)
        assert f"secure aggregation (real protocol, {workers} worker process" in stdout
        runs[workers] = out
    first, second = (torch.load(runs[w] / "checkpoint.pt", weights_only=False) for w in ("1", "3"))
    assert torch.equal(first["global_params"], second["global_params"])
    # a resumed run may change the worker count (results do not depend on it)
    code, stdout, err = gdpfed(capsys, "train", "--out", runs["1"], "--resume", "--secagg-workers", "2")
    assert code == 0, err
    assert "2 worker processes" in stdout


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--secagg", "full"], "--secagg"),
        (["--secagg-execution", "exact_sum"], "--secagg-execution"),
        (["--model-option", "hidden=[8]"], "--model-option"),
        (["--dataset-option", "client_test_fraction=0.2"], "--dataset-option"),
        (["--strategy-option", "rank=2"], "--strategy-option"),
        (["--late-dropout-fraction", "0.5"], "--late-dropout-fraction"),
    ],
)
def test_a_resume_mismatch_names_the_flag_that_was_typed(capsys, tmp_path, plan_file, extra, flag):  # noqa: F811
    from trainer.run.options import config_from_args
    from trainer.runner import TrainConfig

    stored = TrainConfig(dataset="digits", model="mlp", rounds=3, model_options={"hidden": [16]}).model_dump(mode="json")
    parser = app_cli.build_parser({"train": "trainer.cli"})
    args = parser.parse_args(["train", "--out", str(tmp_path), "--resume", *extra])
    with pytest.raises(InvalidInputError) as caught:
        config_from_args(args, stored, 3)
    assert caught.value.field == flag.lstrip("-")
    assert caught.value.reason.startswith(f"{flag} ") and "differs from the run's" in caught.value.reason


def test_auto_records_the_cores_it_may_use(capsys, tmp_path, plan_file, monkeypatch):  # noqa: F811
    monkeypatch.setattr(parallel, "available_workers", lambda: 5)
    out = tmp_path / "auto"
    code, stdout, err = gdpfed(capsys, "train", "--plan", plan_file, *TINY, "--rounds", "1", "--out", out, "--json")
    assert code == 0, err
    assert json.loads(stdout)["secagg_workers"] == 5
    assert json.loads((out / "config.json").read_text())["secagg_workers"] == "auto"


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_a_bad_worker_count_is_one_line_naming_the_option(capsys, tmp_path, plan_file, value):  # noqa: F811
    code, _, err = gdpfed(capsys, "train", "--plan", plan_file, *TINY, "--secagg-workers", value,
                          "--out", tmp_path / "never")
    assert_one_line_error(code, err, "secagg-workers", "positive integer or auto", repr(value))
    assert not (tmp_path / "never").exists()


def test_cells_share_the_cores_when_jobs_run_at_once(monkeypatch, tmp_path):
    monkeypatch.setattr(parallel, "available_workers", lambda: 8)
    assert experiment_runner.cell_secagg_workers(1) is None  # one cell at a time: automatic
    assert experiment_runner.cell_secagg_workers(2) == 4
    assert experiment_runner.cell_secagg_workers(3) == 2
    assert experiment_runner.cell_secagg_workers(16) == 1

    seen = []

    def run(spec, out, config, base, started):
        seen.append(config.secagg_workers)
        return "result"

    monkeypatch.setattr(cell_module, "unit_cell_run", lambda scenario: run)
    from trainer.experiments.config import expand_cells, load_experiment

    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT)
    cells = expand_cells(load_experiment(path), path, smoke=True)
    by_setting = {c.setting: c for c in cells}
    cell_module.run_cell(by_setting["plain"], tmp_path, secagg_workers=2)
    cell_module.run_cell(by_setting["plain"], tmp_path)
    cell_module.run_cell(by_setting["capped"], tmp_path, secagg_workers=2)  # the config's own count wins
    assert seen == [2, "auto", 3]
    # the count changes no result, so it is not part of a cell's fingerprint
    capped = by_setting["capped"]
    uncapped = capped.model_copy(update={"train": {k: v for k, v in capped.train.items() if k != "secagg_workers"}})
    assert capped.fingerprint() == uncapped.fingerprint()


EXPERIMENT = """
name: workers
methods: [gdpfed_plus]
datasets:
  - {name: digits, spec: digits, model: mlp, model_options: {hidden: [8]}, options: {max_test_samples: 100}}
settings:
  - {name: plain}
  - {name: capped, train: {secagg_workers: 3}}
seeds: [0]
scenario:
  groups:
    - {id: strict, epsilon: 1.0, num_clients: 8}
    - {id: loose, epsilon: 4.0, num_clients: 8}
  delta: 0.001
  rounds: 2
  expected_clients: 8
  min_clients_per_pool: 1
"""


@pytest.mark.parametrize("value", [0, "many", True])
def test_an_experiment_refuses_a_bad_worker_count(tmp_path, value):
    from pydantic import ValidationError

    from accounting.errors import InvalidInputError, validation_error_line
    from trainer.experiments.config import expand_cells, load_experiment

    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT.replace("secagg_workers: 3", f"secagg_workers: {json.dumps(value)}"))
    with pytest.raises((InvalidInputError, ValidationError)) as caught:
        cells = expand_cells(load_experiment(path), path, smoke=True)
        cell_module.run_cell(next(c for c in cells if c.setting == "capped"), tmp_path)
    error = caught.value
    field, reason = (error.field, error.reason) if isinstance(error, InvalidInputError) else validation_error_line(error.errors())
    assert "secagg_workers: must be a positive integer or auto" in f"{field}: {reason}", (field, reason)


def test_train_config_takes_auto_or_a_positive_count():
    from trainer.runner import TrainConfig

    assert TrainConfig(dataset="digits", model="mlp", rounds=1).secagg_workers == "auto"
    assert TrainConfig(dataset="digits", model="mlp", rounds=1, secagg_workers=2).secagg_workers == 2


def test_sparse_warns_once_for_pools_that_fall_back_to_full(capsys, tmp_path):
    """--secagg sparse on pools too small for any Harary graph: one warning line naming each
    pool and why, not a silent full mode (docs/secure-aggregation.md §Automatic mode)."""
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({  # a dropout rate of 0.6: no Harary graph meets the bounds
        "groups": [{"id": "s", "epsilon": 4.0, "num_clients": 20}, {"id": "r", "epsilon": 8.0, "num_clients": 20}],
        "delta": 1e-5, "rounds": 5, "expected_clients": 16, "min_clients_per_pool": 2, "dropout_rate": 0.6,
    }))
    out = tmp_path / "sparse"
    code, stdout, err = gdpfed(capsys, "train", "--scenario", scenario, "--method", "gdpfed_plus", *TINY, "--rounds",
                               "1", "--secagg", "sparse", "--out", out)
    assert code == 0, err
    warned = [line for line in err.splitlines() if "--secagg sparse" in line]
    assert len(warned) == 1, err
    pools = [pool["id"] for pool in json.loads((out / "plan.json").read_text())["pools"]]
    assert warned[0].startswith("warning: ") and all(f"{pool} (" in warned[0] for pool in pools), (pools, warned)
    assert "no SecAgg+ graph" in warned[0] and "run full mode" in warned[0]
    summary = json.loads((out / "summary.json").read_text())
    assert any("--secagg sparse" in w for w in summary["warnings"])


def test_the_train_console_says_why_a_pool_ran_full():
    """summary secagg_full_reasons: the console's graph line says why auto kept full mode."""
    from trainer.run.options import format_summary
    from trainer.run.summary import RunSummary

    summary = RunSummary(
        run_dir="r", method="gdpfed_plus", plan_id=None, complete=True, rounds_run=1, rounds=1, start_round=0,
        final_accuracy=None, final_loss=None, best_accuracy=None, epsilon_spent={}, epsilon_target={},
        aborted_rounds={}, model_dim=10, device="cpu", seconds=1.0,
        secagg_graphs={"P1": ["full"], "P2": ["sparse k=70 t=52"]}, secagg_workers=2,
        secagg_full_reasons={"P1": "SecAgg+ k=70 saves < 4x"},
    )
    line = next(line for line in format_summary(summary).splitlines() if line.startswith("secure aggregation"))
    assert line == ("secure aggregation (real protocol, 2 worker processes): P1 full (SecAgg+ k=70 saves < 4x); "
                    "P2 sparse k=70 t=52")


@pytest.mark.parametrize("value", ["nan", "inf", "1.5", "-0.1"])
def test_a_late_dropout_fraction_outside_0_1_says_what_it_takes(capsys, tmp_path, plan_file, value):  # noqa: F811
    code, _, err = gdpfed(capsys, "train", "--plan", plan_file, *TINY, "--late-dropout-fraction", value,
                          "--out", tmp_path / "never")
    assert_one_line_error(code, err, "late-dropout-fraction: ", "must be a number in [0, 1]", value)
