"""The trainer dispatches on a plan's privacy unit: a version 1 plan file trains (as a
client plan), a unit without a training mechanism is refused by name with nothing
written, and the client-level mechanism never runs a plan of another unit."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from accounting.errors import InvalidInputError
from app import cli as app_cli
from planner.units import UNITS
from tests.planner import fake_unit
from tests.trainer.test_cli import TINY, assert_one_line_error, gdpfed
from trainer.runner import TrainConfig, prepare_run
from trainer.units.client.mechanism import pool_mechanisms
from trainer.units.registry import UNITS as TRAINING_UNITS

V1 = Path(__file__).resolve().parents[1] / "planner" / "data" / "plan_v1.json"


@pytest.fixture(autouse=True)
def only_train(monkeypatch):
    monkeypatch.setattr(app_cli, "SUBCOMMAND_MODULES", {"train": "trainer.cli"})


def test_every_unit_has_its_training_mechanism():
    for unit in UNITS.values():
        assert TRAINING_UNITS[unit.name].mechanism == unit.mechanism, unit.name


def test_a_version_1_plan_file_trains(capsys, tmp_path):
    out = tmp_path / "run"
    code, stdout, err = gdpfed(capsys, "train", "--plan", V1, *TINY, "--rounds", "1", "--out", out, "--json")
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["rounds_run"] == 1 and set(summary["epsilon_spent"]) == {"strict", "medium", "relaxed"}
    # the run keeps the document it was given; resume reads it again as a client plan
    assert json.loads((out / "plan.json").read_text())["schema_version"] == 1
    code, _, err = gdpfed(capsys, "train", "--out", out, "--resume")
    assert code == 0, err


def test_a_unit_without_a_training_mechanism_is_refused_by_name(capsys, tmp_path):
    path = tmp_path / "silo.json"
    path.write_text(json.dumps(fake_unit.fake_plan_document()))
    out = tmp_path / "never"
    with fake_unit.registered():
        code, _, err = gdpfed(capsys, "train", "--plan", path, *TINY, "--out", out)
    assert_one_line_error(code, err, "privacy_unit", "test_silo", "'test_dpsgd'", "does not have")
    assert not out.exists()


def test_the_client_level_mechanism_refuses_other_units(tmp_path):
    """Even a unit that names the client mechanism (wrongly) never runs through it."""
    pretender = dataclasses.replace(fake_unit.UNIT, mechanism="gaussian_secagg")
    plan = fake_unit.FakePlan.model_validate(fake_unit.fake_plan_document())
    config = TrainConfig(dataset="digits", model="mlp", rounds=1)
    with fake_unit.registered(pretender):
        with pytest.raises(InvalidInputError) as exc:
            prepare_run(plan, plan.model_dump(mode="json"), config, tmp_path / "never")
    assert exc.value.field == "privacy_unit" and "client-level plans only" in str(exc.value)
    assert "'test_silo'" in str(exc.value)
    assert not (tmp_path / "never").exists()
    with pytest.raises(InvalidInputError) as exc:
        pool_mechanisms(plan, 10, 1)  # type: ignore[arg-type]
    assert exc.value.field == "privacy_unit" and "client plans only" in str(exc.value)
