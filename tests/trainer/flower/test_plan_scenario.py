"""``gdpfed flower app --plan`` refuses a plan whose fields contradict its own scenario, as
``gdpfed train --plan`` does (tests/trainer/test_plan_scenario.py; issue 25 §3). Here, with
the flower extra's tests: it needs flwr (CI's flower pass)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.planner.test_scenario_fixed import client_document
from tests.trainer.test_cli import TINY, assert_one_line_error, gdpfed


def test_flower_app_refuses_a_plan_that_lies_about_its_scenario(capsys, tmp_path: Path) -> None:
    document = client_document()
    document["groups"][0]["epsilon"] = 10
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(document))
    code, _, err = gdpfed(capsys, "flower", "app", "--plan", path, *TINY, "--out", tmp_path / "app",
                          "--run-dir", tmp_path / "run")
    assert_one_line_error(code, err, f"plan: {path}: groups.strict.epsilon: states 10, but the plan's scenario fixes 1")
    assert not (tmp_path / "app").exists()
