"""Plan kinds: ``privacy_unit`` (schema version 2), version 1 documents, the unit registry.

A version 1 document (``data/plan_v1.json``, written by the last version 1 release) still
loads, as a client plan, verifies and re-plans; an unknown version or unit is refused
with one line naming it; a unit registered beside ``client`` is planned, loaded,
described and accounted through the registry while every client-level path refuses it.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest

from accounting.errors import InvalidInputError
from app.cli import run
from planner import load_plan, load_plan_document, make_plan
from planner.ledger import spent_by_group
from planner.loading import load_scenario, load_scenario_document
from planner.schema import SCHEMA_VERSION, Plan, Scenario
from planner.units import UNITS, privacy_unit, spent, unit_of
from planner.units import make_plan as make_plan_of_unit
from planner.verify import verify_executable
from tests.planner import fake_unit
from tests.planner.conftest import worked_scenario

V1 = Path(__file__).parent / "data" / "plan_v1.json"
CHANGES = Path(__file__).resolve().parents[2] / "examples" / "changes.json"


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert run(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def assert_contains(read: object, written: object, where: str = "plan") -> None:
    """Every key and value of ``written`` is in ``read`` (recursively)."""
    if isinstance(written, dict):
        assert isinstance(read, dict), where
        for key, value in written.items():
            assert key in read, f"{where}.{key}"
            assert_contains(read[key], value, f"{where}.{key}")
    elif isinstance(written, list):
        assert isinstance(read, list) and len(read) == len(written), where
        for i, (r, w) in enumerate(zip(read, written)):
            assert_contains(r, w, f"{where}.{i}")
    else:
        assert read == written, where


def test_version_1_documents_load_as_client_plans(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = json.loads(V1.read_text())
    assert document["schema_version"] == 1 and "privacy_unit" not in document
    plan = load_plan(document)
    assert (plan.schema_version, plan.privacy_unit, plan.scenario.privacy_unit) == (2, "client", "client")
    # nothing else changes: every value of the version 1 document is read as it was
    # (fields added since then take their defaults)
    assert_contains(plan.model_dump(mode="json"), {k: v for k, v in document.items() if k != "schema_version"})
    verify_executable(plan)  # the trainer would run it
    assert spent(plan, 10) == spent_by_group(plan, 10)
    # and the command line re-plans it into a version 2 document
    out = tmp_path / "replan.json"
    changes = tmp_path / "changes.json"
    changes.write_text("{}")
    assert run(["plan", "replan", str(V1), "--rounds-done", "10", "--changes", str(changes), "--out", str(out)]) == 0
    capsys.readouterr()
    replanned = json.loads(out.read_text())
    assert (replanned["schema_version"], replanned["privacy_unit"], replanned["start_round"]) == (SCHEMA_VERSION, "client", 10)


def test_new_plans_are_version_2_client_plans() -> None:
    document = make_plan(worked_scenario(), "gdpfed").model_dump(mode="json")
    assert (document["schema_version"], document["privacy_unit"]) == (2, "client")
    assert isinstance(load_plan_document(document), Plan)


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"schema_version": 3}, "schema_version", "version 3"),
        ({"schema_version": "2"}, "schema_version", "'2'"),
        ({"privacy_unit": "no_such_unit"}, "privacy_unit", "'no_such_unit'"),
        ({"privacy_unit": None}, "privacy_unit", "None"),
        ({"schema_version": 1, "privacy_unit": "metric_local"}, "privacy_unit", "version 1"),
    ],
)
def test_unknown_versions_and_units_are_refused_by_name(
    change: dict[str, object], field: str, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = {**json.loads(V1.read_text()), "schema_version": 2, "privacy_unit": "client", **change}
    with pytest.raises(InvalidInputError) as exc:
        load_plan_document(document)
    assert exc.value.field == field and words in str(exc.value)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(document))
    err = one_line_error(capsys, ["plan", "replan", str(path), "--rounds-done", "1", "--changes", str(CHANGES)])
    assert field in err and words in err


def test_a_version_2_document_must_name_its_unit() -> None:
    document = {**json.loads(V1.read_text()), "schema_version": 2}
    with pytest.raises(InvalidInputError) as exc:
        load_plan_document(document)
    assert exc.value.field == "privacy_unit" and "missing" in str(exc.value)


def test_every_registered_unit_declares_its_name_in_its_models() -> None:
    assert "client" in UNITS
    for name, unit in UNITS.items():
        assert unit.name == name and unit.notion and unit.default_method in unit.methods
        for model in (unit.scenario_model, unit.plan_model):
            annotation = model.model_fields["privacy_unit"].annotation
            assert typing.get_args(annotation) == (name,), (model, annotation)


def test_a_registered_unit_plugs_in_and_client_paths_refuse_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario_file = tmp_path / "silos.json"
    scenario_file.write_text(json.dumps({"privacy_unit": "test_silo", "silos": {"a": 1.0, "b": 4.0}, "rounds": 8}))
    with pytest.raises(InvalidInputError) as exc:
        load_scenario_document(scenario_file)
    # a file's content error names the file, then the field (planner.loading.naming_file)
    assert exc.value.field == "scenario" and f"{scenario_file}: privacy_unit: " in str(exc.value)
    assert "'test_silo'" in str(exc.value)
    with fake_unit.registered():
        scenario = load_scenario_document(scenario_file)
        assert isinstance(scenario, fake_unit.FakeScenario)
        plan = make_plan_of_unit(scenario)
        assert isinstance(plan, fake_unit.FakePlan) and unit_of(plan) is privacy_unit("test_silo")
        document = plan.model_dump(mode="json")
        assert (document["schema_version"], document["privacy_unit"]) == (2, "test_silo")
        assert isinstance(load_plan_document(document), fake_unit.FakePlan)
        assert spent(plan, 4) == {"a": 0.5, "b": 2.0}
        # the command line plans it through the registry and prints the unit's description
        assert run(["plan", str(scenario_file), "--method", "local"]) == 0
        assert "local plan for silos a, b" in capsys.readouterr().out
        assert "test_silo plans take one of local, mean" in one_line_error(
            capsys, ["plan", str(scenario_file), "--method", "gdpfed"]
        )
        # client-level paths name the unit instead of misreading the document
        with pytest.raises(InvalidInputError) as exc:
            load_plan(document)
        assert exc.value.field == "privacy_unit" and "'test_silo'" in str(exc.value)
        with pytest.raises(InvalidInputError) as exc:
            load_scenario(scenario_file)
        assert exc.value.field == "scenario" and f"{scenario_file}: privacy_unit: " in str(exc.value)
        assert "'test_silo'" in str(exc.value)
        path = tmp_path / "plan.json"
        path.write_text(json.dumps(document))
        err = one_line_error(capsys, ["plan", "replan", str(path), "--rounds-done", "1", "--changes", str(CHANGES)])
        assert "cannot be re-planned" in err and "'test_silo'" in err
    with pytest.raises(InvalidInputError):
        load_plan_document(document)  # unregistered again


def test_client_scenarios_name_their_unit() -> None:
    assert Scenario.model_validate({**worked_scenario().model_dump(), "privacy_unit": "client"}).privacy_unit == "client"
    with pytest.raises(ValueError, match="privacy_unit"):
        Scenario.model_validate({**worked_scenario().model_dump(), "privacy_unit": "silo_sample"})
