"""A fourth privacy unit registered by a test runs through the one run loop (issue 28).

The toy unit (``tests/trainer/toy_unit``) is one folder plus a line in each registry it
names in ``REGISTRATION_POINTS``; nothing in trainer/, planner/ or app/ names it. With
those lines ``prepare_run`` / ``execute_run`` plan-check, run, log, checkpoint, resume and
summarise it like any unit; without the trainer's line it is refused by name.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accounting.errors import InvalidInputError
from tests.trainer import toy_unit
from tests.trainer.trainer_plans import interrupt_after, quiet_progress
from trainer.run.checkpoint import load_checkpoint
from trainer.runner import TrainConfig, execute_run, prepare_run

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 6


def toy_plan() -> toy_unit.ToyPlan:
    scenario = toy_unit.ToyScenario(clients=40, per_round=10, noise_std=0.01, epsilon_per_round=0.5, rounds=ROUNDS)
    return toy_unit._plan(scenario, "toy")


def config() -> TrainConfig:
    return TrainConfig(dataset="toy", model="toy", rounds=ROUNDS, eval_every=2, strategy="toy")


def run(out: Path, *, resume: bool = False, progress=None):
    plan = toy_plan()
    prepared = prepare_run(plan, plan.model_dump(mode="json"), config(), out, resume=resume)
    return execute_run(prepared, progress=progress or quiet_progress(ROUNDS))


def test_the_toy_unit_touches_at_most_three_files_outside_its_folder() -> None:
    """Its registration points are the only files outside its folder it needs, and no
    package's code names it (a real unit would add one line to each registry file)."""
    files = {Path(str(module.__file__)).resolve().relative_to(ROOT) for module, _ in toy_unit.REGISTRATION_POINTS}
    assert len(files) <= 3, files
    assert files == {Path("planner/units/__init__.py"), Path("trainer/units/registry.py")}
    for package in ("accounting", "planner", "app", "trainer"):
        for path in (ROOT / package).rglob("*.py"):
            assert toy_unit.NAME not in path.read_text(), path


def test_a_registered_toy_unit_runs_through_the_one_loop_and_resumes_exactly(tmp_path) -> None:
    with toy_unit.registered():
        whole = run(tmp_path / "whole")
        with pytest.raises(KeyboardInterrupt):
            run(tmp_path / "cut", progress=interrupt_after(ROUNDS, 2))
        resumed = run(tmp_path / "cut", resume=True)
    assert whole.complete and whole.rounds_run == ROUNDS and whole.privacy_unit == toy_unit.NAME
    assert whole.notion == toy_unit.NOTION and whole.epsilon_spent == {"all": 0.5 * ROUNDS}
    assert whole.secagg_execution is None  # the toy never reads the option: nothing ran
    assert whole.final_loss is not None and whole.final_loss < 0.05  # the released means track the truth
    lines = [json.loads(line) for line in (tmp_path / "whole" / "rounds.jsonl").read_text().splitlines()]
    assert [line["round"] for line in lines] == list(range(ROUNDS))
    assert all(line["privacy_unit"] == toy_unit.NAME and line["sampled"] == {"all": 10} for line in lines)
    assert [line["loss"] is not None for line in lines] == [False, True] * (ROUNDS // 2)
    config_json = json.loads((tmp_path / "whole" / "config.json").read_text())
    assert "secagg_mode" not in config_json and config_json["strategy"] == "toy"
    # resume: the same parameters, ledger and log as the uninterrupted run
    assert resumed.final_loss == whole.final_loss and resumed.epsilon_spent == whole.epsilon_spent
    assert load_checkpoint(tmp_path / "cut" / "checkpoint.pt")["global_params"].equal(
        load_checkpoint(tmp_path / "whole" / "checkpoint.pt")["global_params"])
    strip = ("seconds", "timing")
    cut = [{k: v for k, v in json.loads(line).items() if k not in strip}
           for line in (tmp_path / "cut" / "rounds.jsonl").read_text().splitlines()]
    assert cut == [{k: v for k, v in line.items() if k not in strip} for line in lines]


def test_without_its_trainer_line_the_toy_unit_is_refused_by_name(tmp_path) -> None:
    plan = toy_plan()
    planner_registry = getattr(*toy_unit.REGISTRATION_POINTS[0])
    planner_registry[toy_unit.NAME] = toy_unit.PLANNER_UNIT
    try:
        with pytest.raises(InvalidInputError) as refused:
            prepare_run(plan, plan.model_dump(mode="json"), config(), tmp_path / "never")
    finally:
        del planner_registry[toy_unit.NAME]
    assert refused.value.field == "privacy_unit" and f"'{toy_unit.MECHANISM}'" in refused.value.message
    assert not (tmp_path / "never").exists()
