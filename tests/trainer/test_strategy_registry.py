"""The strategy registry: ``gdpfed train --strategy NAME --strategy-option KEY=JSON``
selects and configures a registered strategy (stored for ``--resume``), bad names,
options and plans are one-line errors naming them, a strategy's own evaluation reaches
``rounds.jsonl`` and ``summary.json``, and the RNG purposes are distinct."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from accounting.errors import InvalidInputError
from app import cli as app_cli
from planner.units import UNITS
from tests.trainer.test_cli import TINY, assert_one_line_error, gdpfed
from tests.trainer.trainer_plans import hand_plan, quiet_progress
from trainer.data import load_dataset
from trainer.run.checkpoint import load_checkpoint
from trainer.run.metrics import read_rounds
from trainer.run.records import report_metrics
from trainer.runner import TrainConfig, execute_run, prepare_run
from trainer.strategies import Strategy, base
from trainer.units.client.strategies import PFAStrategy, PlanStrategy
from trainer.units.strategies import STRATEGIES


@pytest.fixture(autouse=True)
def only_train(monkeypatch):
    monkeypatch.setattr(app_cli, "SUBCOMMAND_MODULES", {"train": "trainer.cli"})


@pytest.fixture
def plan_file(tmp_path):
    """A one-pool-per-group plan: the private group a and the opted-out group b."""
    plan = hand_plan(
        [("a", 2.0, 12, 0.5), ("b", None, 12, 0.5)],
        [("pa", ["a"], 0.8, 2, 0.5), ("pb", ["b"], 0.0, 2, 1.0)],
        rounds=3,
        model_dim=500,
        method="gdpfed",
    )
    path = tmp_path / "plan.json"
    path.write_text(plan.model_dump_json())
    return path


def test_every_registered_strategy_declares_what_it_runs_on():
    assert {"plan", "pfa"} <= set(STRATEGIES)
    assert STRATEGIES["plan"].strategy is PlanStrategy and STRATEGIES["pfa"].strategy is PFAStrategy
    for name, spec in STRATEGIES.items():
        assert spec.name == name and spec.summary and issubclass(spec.strategy, Strategy)
        assert spec.privacy_unit in UNITS
        # plan methods are those of the strategy's own privacy unit
        unit_methods = UNITS[spec.privacy_unit].methods
        assert spec.plan_methods is None or set(spec.plan_methods) <= set(unit_methods)
        assert spec.default_plan_method in (spec.plan_methods or unit_methods)
        with pytest.raises(InvalidInputError) as exc:  # options models forbid unknown keys
            spec.parse_options({"no_such_option": 1})
        assert exc.value.field == "strategy-option no_such_option"


def test_every_boolean_option_takes_only_true_or_false():
    """lax pydantic would read 1, "yes" or "on" as true and switch a mechanism on."""
    checked = 0
    for spec in STRATEGIES.values():
        for name, field in spec.options.model_fields.items():
            if field.annotation is not bool:
                continue
            checked += 1
            for value in (1, 0, "yes", "true", "on", None):
                with pytest.raises(InvalidInputError) as exc:
                    spec.parse_options({name: value})
                assert exc.value.field == f"strategy-option {name}" and "true or false" in exc.value.reason
            for value in (True, False):
                assert getattr(spec.parse_options({name: value}), name) is value
    assert checked >= 2  # plan's adaptive_clip, fedhdp's personalize and adaptive_clip


def test_train_help_and_errors_list_the_registered_strategies(capsys):
    """``gdpfed train --help`` lists every registered strategy (it said ``plan or pfa`` while
    four were registered), from ``STRATEGY_NAMES``, which must equal the registry's names
    (the parser cannot import the registry without torch); an unknown name's error lists them."""
    with pytest.raises(SystemExit):
        app_cli.run(["train", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    [strategy_help] = [part for part in help_text.split("--strategy NAME ")[1:] if part.startswith("training strategy")]
    listed = strategy_help.split(":", 1)[1].split("(")[0].replace(" or ", ", ")
    assert [name.strip() for name in listed.split(",")] == list(STRATEGIES)
    from trainer.run.options import STRATEGY_NAMES

    assert STRATEGY_NAMES == tuple(STRATEGIES)
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert f"[--strategy {'|'.join(STRATEGIES)}]" in readme  # the README's gdpfed train synopsis
    with pytest.raises(InvalidInputError, match=", ".join(STRATEGIES)):
        from trainer.units.strategies import strategy_spec

        strategy_spec("fedsgd")


def test_rng_purposes_are_distinct():
    purposes = {name: value for name, value in vars(base).items() if name.startswith("PURPOSE_")}
    assert {"PURPOSE_DPSGD", "PURPOSE_LAPLACE", "PURPOSE_KMEANS"} <= set(purposes)
    assert len(set(purposes.values())) == len(purposes), purposes


def test_train_selects_a_strategy_by_name_and_resume_keeps_it(capsys, tmp_path, plan_file):
    out = tmp_path / "run"
    code, stdout, err = gdpfed(capsys, "train", "--plan", plan_file, *TINY, "--strategy", "pfa",
                               "--strategy-option", "rank=2", "--strategy-option", "history=3", "--out", out, "--json")
    assert code == 0, err
    assert json.loads(stdout)["strategy"] == "pfa"
    config = json.loads((out / "config.json").read_text())
    assert (config["strategy"], config["strategy_options"]) == ("pfa", {"rank": 2, "history": 3})
    history = load_checkpoint(out / "checkpoint.pt")["strategy"]["public_history"]
    assert history is not None and 1 <= history.shape[0] <= 3  # PFA's own state: it ran
    code, _, err = gdpfed(capsys, "train", "--out", out, "--resume", "--strategy", "plan")
    assert_one_line_error(code, err, "strategy", "differs")
    code, _, err = gdpfed(capsys, "train", "--out", out, "--resume", "--strategy-option", "rank=3")
    assert_one_line_error(code, err, "strategy", "differs")


@pytest.mark.parametrize(
    "extra, needles",
    [
        (["--strategy", "fedsgd"], ["strategy", "'fedsgd'", "plan, pfa"]),
        (["--strategy", "pfa", "--strategy-option", "rank=0"], ["strategy-option rank", "greater than or equal to 1"]),
        (["--strategy", "pfa", "--strategy-option", "rnak=2"], ["strategy-option rnak", "unknown field 'rnak'; did you mean 'rank'?"]),
        (["--strategy", "pfa", "--strategy-option", "rank=two"], ["strategy-option rank", "not a JSON value"]),
        (["--strategy", "pfa", "--strategy-option", "rank"], ["strategy-option", "KEY=JSON"]),
        (["--strategy-option", "adaptive_clip=1"], ["strategy-option adaptive_clip", "true or false"]),
        (["--strategy-option", 'adaptive_clip="yes"'], ["strategy-option adaptive_clip", "true or false"]),
        (["--strategy-option", "rank=2"], ["strategy-option rank", "strategy plan"]),
        (["--strategy", "pfa", "METHOD=dp_fedavg"], ["strategy", "pfa runs on plans of method gdpfed", "dp_fedavg"]),
        # regression data under a classification strategy trained round 0, then evaluation
        # raised (cross-entropy on float targets), exit 1 with a half-written run directory
        *[
            (["--dataset", "metric_synthetic", "--strategy", name],
             ["dataset: metric_synthetic is regression data", f"strategy {name} trains classification",
              "--strategy metric_ifca (metric_local plans)"])
            for name in ("plan", "pfa", "fedhdp")
        ],
    ],
)
def test_bad_strategy_input_exits_2_naming_it(capsys, tmp_path, plan_file, extra, needles):
    if "METHOD=dp_fedavg" in extra:
        extra = [e for e in extra if e != "METHOD=dp_fedavg"]
        document = json.loads(plan_file.read_text())
        document["method"] = "dp_fedavg"
        plan_file.write_text(json.dumps(document))
    out = tmp_path / "never"
    code, _, err = gdpfed(capsys, "train", "--plan", plan_file, *TINY, *extra, "--out", out)
    assert_one_line_error(code, err, *needles)
    assert not out.exists()


def test_every_strategy_declares_the_tasks_it_trains_and_the_hints_name_the_right_ones():
    """``check_data`` and ``check_plan`` suggest registered strategies that do run the data
    and the plan (``strategies_for``); every task some dataset has is trained by one."""
    from trainer.units.strategies import strategies_for

    for spec in STRATEGIES.values():
        assert spec.tasks and set(spec.tasks) <= {"classification", "next_char", "regression"}
    for task in ("classification", "next_char", "regression"):
        assert strategies_for(task=task) == [n for n, s in STRATEGIES.items() if task in s.tasks] != []
    assert strategies_for(task="regression") == ["metric_ifca"]
    assert strategies_for(privacy_unit="metric_local") == ["metric_ifca"]
    assert strategies_for(privacy_unit="client") == ["plan", "pfa", "fedhdp"]


def test_a_metric_plan_under_a_client_strategy_names_the_strategy_that_runs_it(capsys, tmp_path):
    """It said only 'plan runs client plans; this plan's privacy_unit is 'metric_local''."""
    scenario = Path(__file__).resolve().parents[2] / "examples" / "metric.json"
    out = tmp_path / "never"
    code, _, err = gdpfed(capsys, "train", "--scenario", scenario, "--method", "metric_laplace", *TINY,
                          "--rounds", "1", "--out", out)
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].endswith(
        "strategy: plan runs client plans; this plan's privacy_unit is 'metric_local' (run it with --strategy metric_ifca)"
    ), err
    assert not out.exists()


class Evaluating(PlanStrategy):
    """PlanStrategy that reports numbers of its own on evaluated rounds."""

    def evaluate(self, ctx: Any, global_params: torch.Tensor, dataset: Any) -> dict[str, float] | None:
        return {"round_seen": float(ctx.global_round), "norm": float(global_params.norm())}


def test_a_strategys_own_evaluation_reaches_the_log_and_the_summary(tmp_path):
    plan = hand_plan([("a", 4.0, 16, 0.5), ("b", 8.0, 16, 0.5)], [("p", ["a", "b"], 0.5, 3, 1.0)], rounds=4, model_dim=500)
    digits = load_dataset("digits", num_clients=32, seed=0)
    config = TrainConfig(dataset="digits", model="mlp", model_options={"hidden": [8]}, rounds=4, local_steps=1,
                         eval_every=2)
    prepared = prepare_run(plan, plan.model_dump(mode="json"), config, tmp_path / "run", dataset=digits,
                           strategy_factory=Evaluating)
    summary = execute_run(prepared, progress=quiet_progress(4))
    records = read_rounds(tmp_path / "run" / "rounds.jsonl")
    assert [r.metrics.get("round_seen") for r in records] == [None, 1.0, None, 3.0]
    assert summary.final_metrics == records[-1].metrics and summary.final_metrics["norm"] > 0
    assert report_metrics(records[-1])["round_seen"] == 3.0
    # a strategy given as a factory and by name at once is ambiguous
    named = config.model_copy(update={"strategy": "pfa"})
    with pytest.raises(InvalidInputError) as exc:
        prepare_run(plan, plan.model_dump(mode="json"), named, tmp_path / "never", dataset=digits,
                    strategy_factory=Evaluating)
    assert exc.value.field == "strategy"
