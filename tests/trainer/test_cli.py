"""``gdpfed train``: bad input exits 2 with one line and writes nothing; a tiny run writes everything."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from app import cli as app_cli
from tests.trainer.old_skellam import OLD_SKELLAM_PLAN, OLD_SKELLAM_RUN, full_run_ledgers
from tests.trainer.trainer_plans import hand_plan

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def only_train(monkeypatch):
    # The dispatcher imports every package's CLI; these tests need only the trainer's.
    monkeypatch.setattr(app_cli, "SUBCOMMAND_MODULES", {"train": "trainer.cli"})


@pytest.fixture
def plan_file(tmp_path):
    plan = hand_plan(
        [("a", 2.0, 12, 0.5), ("b", None, 12, 0.5)],
        [("pa", ["a"], 0.8, 2, 0.5), ("pb", ["b"], 0.0, 2, 1.0)],
        rounds=3,
        model_dim=500,
    )
    path = tmp_path / "plan.json"
    document = plan.model_dump(mode="json")
    document["id"] = "plan123"
    path.write_text(json.dumps(document))
    return path


TINY = ["--dataset", "digits", "--model", "mlp", "--model-option", "hidden=[16]", "--local-steps", "2", "--batch-size", "8"]


def gdpfed(capsys, *argv):
    code = app_cli.run([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_error(code, err, *needles):
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_tiny_run_writes_every_file_and_json_summary(capsys, tmp_path, plan_file):
    out = tmp_path / "run"
    code, stdout, err = gdpfed(capsys, "train", "--plan", plan_file, *TINY, "--out", out, "--json")
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["rounds_run"] == 3 and summary["complete"]
    assert summary["plan_id"] == "plan123"
    assert summary["epsilon_spent"]["b"] is None and summary["epsilon_spent"]["a"] > 0
    for name in ("plan.json", "config.json", "rounds.jsonl", "summary.json", "checkpoint.pt"):
        assert (out / name).is_file()
    for name in ("accuracy.png", "loss.png"):
        assert (out / name).read_bytes().startswith(PNG)
    assert json.loads((out / "plan.json").read_text())["id"] == "plan123"
    assert "api" not in (out / "config.json").read_text().lower()
    # Plain log lines on a non-terminal stderr: one per round.
    assert sum(line.startswith("round ") for line in err.splitlines()) == 3

    # Human output, and a resume of the finished run changes nothing and agrees.
    code, stdout, err = gdpfed(capsys, "train", "--out", out, "--resume")
    assert code == 0, err
    assert "3/3 rounds" in stdout and "epsilon spent" in stdout
    code, _, err = gdpfed(capsys, "train", "--out", out, "--resume", "--lr", "0.5")
    assert_one_line_error(code, err, "lr", "differs")
    assert "re-plan" not in err


def test_resume_asking_for_more_rounds_names_the_way_to_train_them(capsys, tmp_path, plan_file):
    """A run of 2 of the plan's 3 rounds cannot be resumed with --rounds 3; the refusal said
    only that a resumed run keeps its settings. It names the re-plan of the rest, which works."""
    out = tmp_path / "run"
    code, _, err = gdpfed(capsys, "train", "--plan", plan_file, *TINY, "--rounds", "2", "--out", out)
    assert code == 0, err
    code, _, err = gdpfed(capsys, "train", "--out", out, "--resume", "--rounds", "3")
    assert_one_line_error(
        code, err, "rounds: --rounds 3 differs from the run's 2; a resumed run keeps its settings; to train more "
        "of the plan's 3 rounds, re-plan the rest (gdpfed plan replan PLAN.json --rounds-done 2 --changes FILE "
        "holding {}, or the service's re-plan) and train the re-plan in a new directory")


@pytest.mark.parametrize(
    "case, needles",
    [
        ("missing_plan", ["plan", "file not found"]),
        ("not_json", ["plan", "not valid JSON"]),
        ("other_version", ["schema_version", "99"]),
        ("unknown_unit", ["privacy_unit", "'no_such_unit'"]),
        ("unknown_dataset", ["dataset", "nope"]),
        ("model_misfit", ["model", "lstm"]),
        ("too_many_rounds", ["rounds", "exceeds the plan's 3"]),
        ("bad_model_option", ["model-option"]),
        # a negative width was torch's RuntimeError traceback (exit 1), not one line
        ("negative_width", ["model-option hidden.0", "greater than or equal to 1"]),
        ("resume_nothing", ["resume"]),
        ("report_without_key", ["api-key"]),
        # the key file is named like every other file the command reads (before: "No such file
        # or directory: PATH", and a traceback for a file that is not UTF-8 text)
        ("key_file_missing", ["api-key-file", "file not found"]),
        ("key_file_binary", ["api-key-file", "cannot read", "UnicodeDecodeError"]),
        ("key_file_directory", ["api-key-file", "cannot read"]),
        # an empty --api-key (an unset variable, --api-key "$CI_KEY") is refused, never
        # replaced by $GDPFED_API_KEY, which may hold another key
        ("empty_api_key", ["api-key", "empty"]),
        ("no_plan", ["plan"]),
        ("bad_device", ["device"]),
        ("pool_noise_edited", ["pools.pa", "noise_share_std", "under-noises"]),
        ("rate_edited", ["groups.a", "above its budget"]),
        # the plan states no discrete blocks: skellam by name is refused, naming the pool's block
        ("skellam_without_blocks", ["pools.pa.discrete", "states no discrete block", "gaussian_continuous"]),
    ],
)
def test_bad_input_exits_2_one_line_nothing_written(capsys, tmp_path, plan_file, case, needles, monkeypatch):
    monkeypatch.delenv("GDPFED_API_KEY", raising=False)
    out = tmp_path / "never"
    plan_args = ["--plan", plan_file]
    extra = list(TINY)
    if case == "missing_plan":
        plan_args = ["--plan", tmp_path / "absent.json"]
    elif case == "not_json":
        bad = tmp_path / "bad.json"
        bad.write_text("{not json")
        plan_args = ["--plan", bad]
    elif case == "other_version":
        document = json.loads(plan_file.read_text())
        document["schema_version"] = 99
        other = tmp_path / "v99.json"
        other.write_text(json.dumps(document))
        plan_args = ["--plan", other]
    elif case == "unknown_unit":
        document = json.loads(plan_file.read_text())
        document["privacy_unit"] = "no_such_unit"
        other = tmp_path / "silo.json"
        other.write_text(json.dumps(document))
        plan_args = ["--plan", other]
    elif case == "unknown_dataset":
        extra[1] = "nope"
    elif case == "model_misfit":
        extra = ["--dataset", "digits", "--model", "lstm"]
    elif case == "too_many_rounds":
        extra += ["--rounds", "4"]
    elif case == "bad_model_option":
        extra = ["--dataset", "digits", "--model", "mlp", "--model-option", "hidden=banana"]
    elif case == "negative_width":
        extra = ["--dataset", "digits", "--model", "mlp", "--model-option", "hidden=[-1]"]
    elif case == "resume_nothing":
        extra += ["--resume"]
    elif case == "report_without_key":
        extra += ["--report-to", "http://127.0.0.1:9"]
    elif case.startswith("key_file_"):
        key_file = {"missing": tmp_path / "absent.key", "binary": tmp_path / "binary.key",
                    "directory": tmp_path}[case.removeprefix("key_file_")]
        (tmp_path / "binary.key").write_bytes(b"gdpfed_\xd0\x00\xff")
        extra += ["--report-to", "http://127.0.0.1:9", "--api-key-file", key_file]
    elif case == "empty_api_key":
        monkeypatch.setenv("GDPFED_API_KEY", "gdpfed_another-key")
        extra += ["--report-to", "http://127.0.0.1:9", "--api-key", ""]
    elif case == "no_plan":
        plan_args = []
    elif case == "bad_device":
        extra += ["--device", "tpu"]
    elif case == "skellam_without_blocks":
        extra += ["--secagg-mechanism", "skellam"]
    elif case in ("pool_noise_edited", "rate_edited"):
        # hand-edited plan files once ran with exit 0 (issue 9 §4)
        document = json.loads(plan_file.read_text())
        if case == "pool_noise_edited":
            document["pools"][0]["noise_share_std"] = 0.01
        else:
            document["groups"][0]["sampling_rate"] = 0.9
            document["groups"][0]["phases"][-1]["sampling_rate"] = 0.9
        edited = tmp_path / "edited.json"
        edited.write_text(json.dumps(document))
        plan_args = ["--plan", edited]
    code, _, err = gdpfed(capsys, "train", *plan_args, *extra, "--out", out)
    assert_one_line_error(code, err, *needles)
    assert not out.exists()


def test_refuses_a_non_empty_out_directory(capsys, tmp_path, plan_file):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    code, _, err = gdpfed(capsys, "train", "--plan", plan_file, *TINY, "--out", out)
    assert_one_line_error(code, err, "out", "not empty")
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_refuses_an_out_directory_below_a_file(capsys, tmp_path, plan_file):
    """Was mkdir's NotADirectoryError traceback (exit 1) once the run was prepared."""
    (tmp_path / "afile").write_text("mine")
    code, _, err = gdpfed(capsys, "train", "--plan", plan_file, *TINY, "--out", tmp_path / "afile" / "run" / "sub")
    assert_one_line_error(code, err, "out", "afile is a file, not a directory")
    assert (tmp_path / "afile").read_text() == "mine"


def test_importing_the_train_cli_does_not_import_torch():
    code = "import sys, trainer.cli; sys.exit(1 if 'torch' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_scenario_is_planned_then_trained(capsys, tmp_path):
    scenario = tmp_path / "scenario.json"
    # no model_dim: the trainer plans for the model it builds (digits MLP 64-16-10: 1210 parameters)
    scenario.write_text(json.dumps({
        "groups": [{"id": "s", "epsilon": 2.0, "num_clients": 20}, {"id": "r", "epsilon": 8.0, "num_clients": 20}],
        "delta": 1e-5, "rounds": 50, "expected_clients": 16, "min_clients_per_pool": 2,
    }))
    out = tmp_path / "run"
    code, stdout, err = gdpfed(
        capsys, "train", "--scenario", scenario, "--method", "gdpfed_plus", *TINY, "--rounds", "2", "--out", out, "--json"
    )
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["method"] == "gdpfed_plus" and summary["rounds_run"] == 2 and summary["complete"]
    stored = json.loads((out / "plan.json").read_text())
    assert (stored["schema_version"], stored["privacy_unit"], stored["rounds"]) == (2, "client", 50)
    assert stored["scenario"]["model_dim"] == summary["model_dim"] == 1210
    assert "model_dim" not in err  # planned for this model: no mismatch warning
    assert "noise-to-signal ratio" in err  # printed at the start of the run
    # Two of fifty rounds spend less than the whole budget.
    assert 0 < summary["epsilon_spent"]["s"] < 2.0
    code, _, err = gdpfed(capsys, "train", "--scenario", scenario, "--method", "compare", *TINY, "--out", tmp_path / "x")
    assert_one_line_error(code, err, "method")
    assert not (tmp_path / "x").exists()

    # a model_dim in the scenario that is not the model's is replaced, with a warning
    document = json.loads(scenario.read_text())
    scenario.write_text(json.dumps({**document, "model_dim": 600}))
    code, _, err = gdpfed(
        capsys, "train", "--scenario", scenario, "--method", "dp_fedavg", *TINY, "--rounds", "1", "--out", tmp_path / "y"
    )
    assert code == 0, err
    assert "model_dim 600 is replaced by the model's 1210 parameters" in err
    assert json.loads((tmp_path / "y" / "plan.json").read_text())["scenario"]["model_dim"] == 1210


def test_float32_math_is_ieee_unless_tf32_is_asked_for(capsys, tmp_path, plan_file):
    """docs/trainer.md §Reproducible GPU math: cuDNN's TF32 default is switched off for a run."""
    import torch

    cudnn: Any = torch.backends.cudnn  # its conv/rnn submodules are set at import, untyped (as in trainer/device.py)
    backends: tuple[Any, ...] = (torch.backends.cuda.matmul, cudnn.conv, cudnn.rnn)
    before = [b.fp32_precision for b in backends], torch.backends.cudnn.deterministic
    try:
        for backend in backends:
            backend.fp32_precision = "tf32"  # as cuDNN convolutions default to
        code, _, err = gdpfed(capsys, "train", "--plan", plan_file, *TINY, "--rounds", "1", "--out", tmp_path / "a")
        assert code == 0, err
        assert [b.fp32_precision for b in backends] == ["ieee"] * 3
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
        code, _, err = gdpfed(
            capsys, "train", "--plan", plan_file, *TINY, "--rounds", "1", "--out", tmp_path / "b", "--allow-tf32"
        )
        assert code == 0, err
        assert [b.fp32_precision for b in backends] == ["tf32"] * 3
        assert not torch.backends.cudnn.deterministic
    finally:
        for backend, value in zip(backends, before[0]):
            backend.fp32_precision = value
        torch.backends.cudnn.deterministic = before[1]


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: data[: len(data) // 2], id="truncated"),
        pytest.param(lambda data: b'{"x": ', id="json_fragment"),
        pytest.param(lambda data: b"", id="empty"),
        pytest.param(lambda data: b"\x80\x04garbage that is no pickle", id="bad_pickle"),
    ],
)
def test_resume_from_a_damaged_checkpoint_is_one_line_naming_the_file(capsys, tmp_path, plan_file, damage):
    out = tmp_path / "run"
    code, _, err = gdpfed(capsys, "train", "--plan", plan_file, *TINY, "--rounds", "1", "--out", out)
    assert code == 0, err
    checkpoint = out / "checkpoint.pt"
    checkpoint.write_bytes(damage(checkpoint.read_bytes()))
    code, _, err = gdpfed(capsys, "train", "--out", out, "--resume")
    assert_one_line_error(code, err, "resume", str(checkpoint))


def test_resume_with_a_damaged_config_is_one_line_naming_the_file(capsys, tmp_path, plan_file):
    """Was 'lr: Input should be greater than 0', as if --lr had been given."""
    out = tmp_path / "run"
    code, _, err = gdpfed(capsys, "train", "--plan", plan_file, *TINY, "--rounds", "1", "--out", out)
    assert code == 0, err
    config = out / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "lr": -1}))
    code, _, err = gdpfed(capsys, "train", "--out", out, "--resume")
    assert_one_line_error(code, err, f"resume: {config}: lr: Input should be greater than 0")


def test_a_yaml_plan_trains_like_its_json_and_bad_yaml_is_one_line(capsys, tmp_path, plan_file):
    """Plans are read as every other document (planner.loading.read_document): .yaml/.yml as YAML, else JSON."""
    import yaml

    document = json.loads(plan_file.read_text())
    plan_yaml = tmp_path / "plan.yaml"
    plan_yaml.write_text(yaml.safe_dump(document))
    code, _, err = gdpfed(capsys, "train", "--plan", plan_yaml, *TINY, "--rounds", "1", "--out", tmp_path / "run")
    assert code == 0, err
    assert json.loads((tmp_path / "run" / "plan.json").read_text()) == document
    broken = tmp_path / "broken.yml"
    broken.write_text("groups: [a, b\nrounds: 3\n")
    code, _, err = gdpfed(capsys, "train", "--plan", broken, *TINY, "--out", tmp_path / "other")
    assert_one_line_error(code, err, "plan", f"{broken}:", "not valid YAML")
    assert not (tmp_path / "other").exists()


def _understated_line(err: str) -> str:
    lines = [line for line in err.splitlines() if "below what its skellam run spends" in line]
    assert len(lines) == 1, err
    return lines[0]


def test_an_old_skellam_plan_trains_with_one_warning_and_its_ledger_counts_the_skellam_figures(capsys, tmp_path):
    """A plan stating the Gaussian's figures below its blocks' ledger was refused by gdpfed train
    after the upgrade: it runs, warning once with the groups and the figure the ledger counts; a
    hand edit whose blocks overspend is still refused."""
    from planner import ledger as plan_ledger
    from planner.units import load_plan

    plan = load_plan(json.loads(OLD_SKELLAM_PLAN.read_text()))
    executed = {
        g.id: plan_ledger.epsilon_spent(plan, g, plan.rounds, mechanism="skellam") for g in plan.groups
    }
    below = [g.id for g in plan.groups if g.epsilon_spent < executed[g.id]]  # type: ignore[operator]
    assert below, "the fixture states no figure below the Skellam ledger"
    out = tmp_path / "run"
    code, stdout, err = gdpfed(capsys, "train", "--plan", OLD_SKELLAM_PLAN, *TINY, "--rounds", "1", "--out", out, "--json")
    assert code == 0, err
    line = _understated_line(err)
    for group in plan.groups:
        assert (f"{group.id}: states {group.epsilon_spent:.10g}, the ledger counts {executed[group.id]:.10g}" in line) == (
            group.id in below), line
    summary = json.loads(stdout)
    for group in plan.groups:
        one_round = plan_ledger.epsilon_spent(plan, group, 1, mechanism="skellam")
        assert summary["epsilon_spent"][group.id] == pytest.approx(one_round, rel=1e-12)

    # hand edits whose block, or whose stated noise, does not meet the budget are refused as before
    for name in ("block", "sigma"):
        document = json.loads(OLD_SKELLAM_PLAN.read_text())
        pool = document["pools"][1]
        if name == "block":
            pool["discrete"]["total_variance"] *= 0.5
            pool["discrete"]["share_variance"] *= 0.5
        else:
            for field in ("noise_multiplier", "noise_std", "noise_share_std"):
                pool[field] *= 0.5
            document["groups"][1]["effective_noise_multiplier"] *= 0.5
            for phase in document["groups"][1]["phases"]:
                phase["noise_multiplier"] *= 0.5
        edited = tmp_path / f"{name}.json"
        edited.write_text(json.dumps(document))
        code, _, err = gdpfed(capsys, "train", "--plan", edited, *TINY, "--rounds", "1", "--out", tmp_path / name)
        assert_one_line_error(code, err, "groups.medium", "above its budget 2")
        assert not (tmp_path / name).exists()


def test_a_run_of_an_old_skellam_plan_interrupted_before_the_upgrade_resumes(capsys, tmp_path):
    """The run directory was written at 99ba0bd (checkpoint after round 1 of 3): --resume verifies
    the stored plan again, which refused its Gaussian figures; it runs the last round on the
    Skellam ledger, each round once."""
    import shutil

    from planner import ledger as plan_ledger
    from planner.units import load_plan

    out = tmp_path / "run"
    shutil.copytree(OLD_SKELLAM_RUN, out)
    code, stdout, err = gdpfed(capsys, "train", "--out", out, "--resume", "--json")
    assert code == 0, err
    _understated_line(err)
    summary = json.loads(stdout)
    assert summary["rounds_run"] == 3 and summary["complete"]
    rounds = [json.loads(line)["round"] for line in (out / "rounds.jsonl").read_text().splitlines()]
    assert rounds == [0, 1, 2]
    plan = load_plan(json.loads((out / "plan.json").read_text()))
    for group in plan.groups:
        assert summary["epsilon_spent"][group.id] == pytest.approx(
            plan_ledger.epsilon_spent(plan, group, 3, mechanism="skellam"), rel=1e-12)


@pytest.mark.parametrize("start", ["plan", "resume"])
def test_an_old_skellam_plans_full_run_ledger_is_composed_once_before_it_trains(capsys, tmp_path, monkeypatch, start):
    """The old plan's blocks are an earlier calibration's: planner.verify's step 6 and the trainer's
    check of each block's own noise (trainer.units.client.discrete) both need every member's full-run
    Skellam ledger; it is composed once per group (twice before), for a new run and for the resume
    of the run written at 99ba0bd alike."""
    import shutil

    out = tmp_path / "run"
    if start == "resume":
        shutil.copytree(OLD_SKELLAM_RUN, out)
        counts = full_run_ledgers(monkeypatch, out / "plan.json")
        code, _, err = gdpfed(capsys, "train", "--out", out, "--resume")
    else:
        counts = full_run_ledgers(monkeypatch, OLD_SKELLAM_PLAN)
        code, _, err = gdpfed(capsys, "train", "--plan", OLD_SKELLAM_PLAN, *TINY, "--rounds", "1", "--out", out)
    assert code == 0, err
    _understated_line(err)
    assert counts and counts == dict.fromkeys(counts, 1), counts


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
@pytest.mark.parametrize("option", ["--lr", "--server-lr", "--alpha", "--momentum", "--server-momentum"])
def test_a_non_finite_float_option_is_refused_naming_the_option(capsys, tmp_path, plan_file, option, value):
    """Every float option of a run (TrainConfig's floats) refuses NaN and both infinities as
    'must be a finite number', by the option's name, before anything is read or written. Before,
    --lr inf passed the bound gt=0 and was refused only after the data and model were built
    ('lr: must be a positive number, got inf'), --server-lr inf trained (exit 0) and --alpha inf
    was never checked; NaN was named by the field (server_lr)."""
    out = tmp_path / "run"
    code, _, err = gdpfed(capsys, "train", "--plan", plan_file, *TINY, "--out", out, f"{option}={value}")
    assert_one_line_error(code, err, f"gdpfed train: error: {option[2:]}: must be a finite number")
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--local-steps", "0"], "local-steps: Input should be greater than or equal to 1"),
        (["--batch-size", "0"], "batch-size: Input should be greater than or equal to 1"),
        (["--server-momentum", "1"], "server-momentum: Input should be less than 1"),
        (["--eval-every", "0"], "eval-every: Input should be greater than or equal to 1"),
        (["--opt-out-assignment", "skewed", "--skewed-label", "-1"],
         "skewed-label: Input should be greater than or equal to 0"),
    ],
)
def test_a_bad_run_option_is_named_as_typed_not_as_its_field(capsys, tmp_path, argv, line):
    """TrainConfig's errors from the command line name the option (trainer.run.options.option_error
    through option_flag, the one map of fields to options), where they named the pydantic field
    (local_steps), which the user never typed."""
    code, _, err = gdpfed(capsys, "train", "--plan", tmp_path / "absent.json", *TINY, *argv)
    assert_one_line_error(code, err, f"gdpfed train: error: {line}")


def test_skewed_label_without_the_skewed_assignment_is_refused_naming_both(capsys, tmp_path, plan_file):
    """--skewed-label is read only by --opt-out-assignment skewed; before, given alone (or with
    random) it was ignored in silence and the run dealt its clients at random."""
    out = tmp_path / "run"
    for assignment in ([], ["--opt-out-assignment", "random"]):
        code, _, err = gdpfed(capsys, "train", "--plan", plan_file, *TINY, "--skewed-label", "3", *assignment,
                              "--out", out)
        assert_one_line_error(code, err, "skewed-label: --skewed-label goes with --opt-out-assignment skewed")
        assert not out.exists()
    code, _, err = gdpfed(capsys, "train", "--plan", plan_file, *TINY, "--rounds", "1", "--skewed-label", "3",
                          "--opt-out-assignment", "skewed", "--out", out)
    assert code == 0, err
    assert json.loads((out / "config.json").read_text())["skewed_label"] == 3
    # a resumed run of random dealing is refused the label too, though 7 equals its stored default
    code, _, err = gdpfed(capsys, "train", "--plan", plan_file, *TINY, "--rounds", "1", "--out", tmp_path / "random")
    assert code == 0, err
    code, _, err = gdpfed(capsys, "train", "--out", tmp_path / "random", "--resume", "--skewed-label", "7")
    assert_one_line_error(code, err, "skewed-label: --skewed-label goes with --opt-out-assignment skewed")


def test_resume_validates_the_stored_config_once(capsys, tmp_path, plan_file, monkeypatch):
    """gdpfed train --resume read config.json through TrainConfig twice (trainer/cli.py _resolve,
    then config_from_args); once now, naming the file when it is invalid: one line, exit 2."""
    from trainer.run.config import TrainConfig

    out = tmp_path / "run"
    code, _, err = gdpfed(capsys, "train", "--plan", plan_file, *TINY, "--rounds", "1", "--out", out)
    assert code == 0, err
    stored = json.loads((out / "config.json").read_text())
    validated: list[Any] = []
    model_validate = TrainConfig.model_validate

    def counting(obj: Any, *args: Any, **kwargs: Any) -> Any:
        validated.append(obj)
        return model_validate(obj, *args, **kwargs)

    monkeypatch.setattr(TrainConfig, "model_validate", counting)
    code, _, err = gdpfed(capsys, "train", "--out", out, "--resume")
    assert code == 0, err
    assert validated == [stored]

    validated.clear()
    (out / "config.json").write_text(json.dumps({**stored, "local_steps": 0}))
    code, _, err = gdpfed(capsys, "train", "--out", out, "--resume")
    assert_one_line_error(code, err, f"gdpfed train: error: resume: {out / 'config.json'}: local_steps: Input should "
                          "be greater than or equal to 1")
    assert len(validated) == 1
