"""Every file the ``gdpfed`` CLI reads: a malformed one is exit 2 with one line naming the
file, the position (line:column) and the problem, never a parser's multi-line message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import run

ROOT = Path(__file__).resolve().parents[2]

# A flow sequence left open: PyYAML's message spans six lines and quotes the text twice.
BROKEN_YAML = "name: tiny\nmethods: [gdpfed_plus, dp_fedavg\nseeds: [0]\n"
BROKEN_JSON = '{"groups": [],\n  "delta": }\n'


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert run(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("command", [["experiment"], ["plan"], ["train", "--dataset", "synthetic", "--model", "logreg", "--method", "gdpfed_plus", "--scenario"]])
def test_malformed_yaml_is_one_line_with_file_and_position(capsys, tmp_path, command):
    bad = tmp_path / "bad.yaml"
    bad.write_text(BROKEN_YAML)
    err = one_line_error(capsys, [*command, str(bad)])
    # the problem is met at line 3, column 6 (1-based), inside the sequence opened at 2:10
    assert f"{bad}:3:6: not valid YAML: expected ',' or ']', but got ':'" in err, err
    assert "started at 2:10" in err and "<unicode string>" not in err


def test_yaml_control_character_names_its_position(capsys, tmp_path):
    bad = tmp_path / "ctrl.yaml"
    bad.write_text("name: tiny\nseeds: \x07\n")
    err = one_line_error(capsys, ["experiment", str(bad)])
    assert f"{bad}:2:8: not valid YAML: character U+0007" in err, err


@pytest.mark.parametrize(
    "argv",
    [["plan", "{bad}"], ["plan", "replan", "{plan}", "--changes", "{bad}", "--rounds-done", "1"],
     ["train", "--dataset", "synthetic", "--model", "logreg", "--plan", "{bad}"], ["flower", "app", "--plan", "{bad}", "--dataset", "synthetic", "--model",
                                     "logreg", "--out", "{tmp}/app", "--run-dir", "{tmp}/run"]],
)
def test_malformed_json_is_one_line_with_file_and_position(capsys, tmp_path, argv):
    if argv[0] == "flower":
        pytest.importorskip("flwr", reason="the flower extra is not installed")
    bad, plan = tmp_path / "bad.json", tmp_path / "plan.json"
    bad.write_text(BROKEN_JSON)
    if "{plan}" in argv:
        assert run(["plan", str(ROOT / "examples" / "scenario.json"), "--out", str(plan)]) == 0
    err = one_line_error(capsys, [a.format(bad=bad, tmp=tmp_path, plan=plan) for a in argv])
    assert f"{bad}:2:12: not valid JSON: Expecting value" in err, err


def test_flower_app_directory_with_a_broken_manifest(capsys, tmp_path):
    pytest.importorskip("flwr", reason="the flower extra is not installed")
    app = tmp_path / "app"
    app.mkdir()
    (app / "plan.json").write_text(json.dumps({"schema_version": 2}))
    (app / "pyproject.toml").write_text("[tool.flwr.app.config]\nseed = \n")
    for command in ("local", "loopback"):
        err = one_line_error(capsys, ["flower", command, str(app)])
        assert "app_dir" in err and "pyproject.toml is not valid TOML" in err and "line 2" in err, err
    (app / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    err = one_line_error(capsys, ["flower", "loopback", str(app)])
    assert "no [tool.flwr.app.config] table" in err, err


DUPLICATE_YAML = """groups:
  - id: strict
    epsilon: 1
    num_clients: 100
    epsilon: 8
  - {id: loose, epsilon: 4, num_clients: 100}
delta: 1.0e-5
rounds: 10
clip_norm: 1.0
model_dim: 1000
expected_clients: 30
"""


def test_a_duplicate_yaml_key_is_refused_not_resolved_to_the_last(capsys, tmp_path):
    dup = tmp_path / "dup.yaml"
    dup.write_text(DUPLICATE_YAML)
    err = one_line_error(capsys, ["plan", str(dup)])
    assert f"{dup}:5:5: duplicate key 'epsilon'" in err, err
    # a merge key may still be overridden, as YAML defines
    merged = tmp_path / "merged.yaml"
    merged.write_text(DUPLICATE_YAML.replace("    num_clients: 100\n    epsilon: 8\n", "    num_clients: 100\n")
                      .replace("  - {id: loose, epsilon: 4, num_clients: 100}",
                               "  - &base {id: loose, epsilon: 4, num_clients: 100}\n  - {<<: *base, id: late}"))
    assert run(["plan", str(merged), "--out", str(tmp_path / "plan.json")]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("argv", [["plan", "{dup}"], ["train", "--dataset", "synthetic", "--model", "logreg", "--plan", "{dup}"]])
def test_a_duplicate_json_key_is_refused_not_resolved_to_the_last(capsys, tmp_path, argv):
    dup = tmp_path / "dup.json"
    dup.write_text('{"groups": [{"id": "strict", "epsilon": 1, "num_clients": 100, "epsilon": 8}],\n'
                   ' "delta": 1e-5, "rounds": 10, "clip_norm": 1.0, "model_dim": 1000, "expected_clients": 30}\n')
    err = one_line_error(capsys, [a.format(dup=dup) for a in argv])
    assert f"{dup}: duplicate key 'epsilon'" in err, err


def test_a_json_experiment_config_is_read_as_json(capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "tiny",\n "seeds": [0],\n}\n')
    err = one_line_error(capsys, ["experiment", str(bad)])
    assert f"{bad}:3:1: not valid JSON" in err, err


def test_a_keep_ratio_error_in_a_file_names_the_field_and_the_allowed_values(capsys, tmp_path):
    scenario = json.loads((ROOT / "examples" / "scenario.json").read_text())
    scenario["groups"][0]["keep_ratio"] = 5
    bad = tmp_path / "kr.json"
    bad.write_text(json.dumps(scenario))
    err = one_line_error(capsys, ["plan", str(bad)])
    assert err.endswith("groups.0.keep_ratio: must be a number in [1e-06, 1] or 'auto'\n"), err


def test_replan_names_every_changes_field_with_one_prefix(capsys, tmp_path):
    plan, changes = tmp_path / "plan.json", tmp_path / "changes.json"
    assert run(["plan", str(ROOT / "examples" / "scenario.json"), "--out", str(plan)]) == 0
    argv = ["plan", "replan", str(plan), "--changes", str(changes), "--rounds-done", "10"]
    changes.write_text(json.dumps({"groups": [{"id": "strict", "epsilon": -1}]}))
    invalid = one_line_error(capsys, argv)
    changes.write_text(json.dumps({"groups": [{"id": "strict", "epsilon": 1e-6}]}))
    conflict = one_line_error(capsys, argv)
    assert "changes.groups.0.epsilon: " in invalid and "Value error" not in invalid, invalid
    assert "changes.groups.0.epsilon" in conflict, conflict


def _invalid_files(tmp_path: Path) -> dict[str, Path]:
    """A scenario (JSON and YAML) and a plan whose content does not validate."""
    import yaml

    scenario = json.loads((ROOT / "examples" / "scenario.json").read_text())
    scenario["groups"][0]["epsilon"] = -1
    files = {"scenario": tmp_path / "bad-scenario.json", "yaml": tmp_path / "bad-scenario.yaml",
             "plan": tmp_path / "bad-plan.json", "versionless": tmp_path / "versionless.json"}
    files["scenario"].write_text(json.dumps(scenario))
    files["yaml"].write_text(yaml.safe_dump(scenario))
    assert run(["plan", str(ROOT / "examples" / "scenario.json"), "--out", str(files["plan"])]) == 0
    plan = json.loads(files["plan"].read_text())
    files["versionless"].write_text(json.dumps({k: v for k, v in plan.items() if k != "schema_version"}))
    plan["rounds"] = -3
    files["plan"].write_text(json.dumps(plan))
    return files


@pytest.mark.parametrize(
    "argv, kind, file, where",
    [
        (["plan", "{scenario}"], "scenario", "scenario", "groups.0.epsilon: Input should be greater than 0"),
        (["plan", "{yaml}"], "scenario", "yaml", "groups.0.epsilon: Input should be greater than 0"),
        (["plan", "sweep", "{scenario}", "--group", "strict", "--epsilons", "1"], "scenario", "scenario",
         "groups.0.epsilon: Input should be greater than 0"),
        (["train", "--scenario", "{yaml}", "--method", "gdpfed_plus", "--dataset", "synthetic", "--model", "logreg",
          "--out", "{tmp}/run"], "scenario", "yaml", "groups.0.epsilon: Input should be greater than 0"),
        (["train", "--plan", "{plan}", "--dataset", "synthetic", "--model", "logreg", "--out", "{tmp}/run"],
         "plan", "plan", "rounds: Input should be greater than or equal to 0"),
        (["train", "--plan", "{versionless}", "--dataset", "synthetic", "--model", "logreg", "--out", "{tmp}/run"],
         "plan", "versionless", "schema_version: missing"),
        (["plan", "replan", "{plan}", "--changes", "{tmp}/none.json", "--rounds-done", "1"], "plan", "plan", "rounds: Input should be greater than or equal to 0"),
        (["flower", "app", "--plan", "{plan}", "--dataset", "synthetic", "--model", "logreg", "--out", "{tmp}/app",
          "--run-dir", "{tmp}/run"], "plan", "plan", "rounds: Input should be greater than or equal to 0"),
    ],
)
def test_an_invalid_scenario_or_plan_file_is_named_with_the_field(capsys, tmp_path, argv, kind, file, where):
    """As a file that does not parse, and as gdpfed experiment's configurations: exit 2, one
    line, ``KIND: FILE: field.path: problem``."""
    if argv[0] == "flower":
        pytest.importorskip("flwr", reason="the flower extra is not installed")
    files = _invalid_files(tmp_path)
    (tmp_path / "none.json").write_text("{}")
    err = one_line_error(capsys, [a.format(tmp=tmp_path, **files) for a in argv])
    assert err.startswith(f"gdpfed {argv[0]}: error: {kind}: {files[file]}: {where}"), err
    assert not (tmp_path / "run").exists() and not (tmp_path / "app").exists()
