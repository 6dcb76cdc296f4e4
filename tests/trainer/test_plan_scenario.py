"""The commands that read a plan refuse one that states a value its own scenario does not
fix, in one line naming the file and the field (issue 25 §3; docs/ledger.md §5), and a
run's budgets are the scenario's.

Before: ``groups[strict].epsilon`` raised from 1 to 10 trained, and the summary said
"spent 0.5605 of 10" under a scenario that fixes 1.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app import cli as app_cli
from tests.planner.test_scenario_fixed import TAMPERS, client_document, silo_document
from tests.trainer.test_cli import TINY, assert_one_line_error, gdpfed
from tests.trainer.trainer_plans import hand_plan

# one tamper of each field kind of each plan kind, through the command line
CLI_TAMPERS = [t for t in TAMPERS if t[3] in (
    "groups.strict.epsilon", "groups.strict.num_clients", "accountant", "silos.a.epsilon", "batch_size",
    "groups.fixed.leakage_budget", "groups.fixed.noise_multiplier", "rounds",
)]


@pytest.fixture(autouse=True)
def only_train_and_flower(monkeypatch):
    monkeypatch.setattr(app_cli, "SUBCOMMAND_MODULES", {"train": "trainer.cli"})


@pytest.mark.parametrize(
    ("kind", "make", "edit", "field", "stated", "fixed"), CLI_TAMPERS, ids=[f"{t[0]}-{t[3]}" for t in CLI_TAMPERS]
)
def test_train_refuses_a_plan_that_lies_about_its_scenario(
    capsys, tmp_path: Path, kind: str, make: Callable[[], dict[str, Any]], edit: Callable[[dict[str, Any]], None],
    field: str, stated: str, fixed: str,
) -> None:
    document = make()
    edit(document)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(document))
    out = tmp_path / "never"
    code, _, err = gdpfed(capsys, "train", "--plan", path, *TINY, "--out", out)
    assert_one_line_error(
        code, err, f"gdpfed train: error: plan: {path}: {field}: states {stated}, but the plan's scenario fixes {fixed}"
    )
    assert not out.exists()


def test_resume_refuses_a_stored_plan_edited_after_the_run_began(capsys, tmp_path: Path) -> None:
    plan = hand_plan([("a", 2.0, 12, 0.5), ("b", None, 12, 0.5)],
                     [("pa", ["a"], 5.0, 2, 0.5), ("pb", ["b"], 0.0, 2, 1.0)], rounds=3, model_dim=500)
    path = tmp_path / "plan.json"
    path.write_text(plan.model_dump_json())
    out = tmp_path / "run"
    code, stdout, err = gdpfed(capsys, "train", "--plan", path, *TINY, "--rounds", "1", "--out", out, "--json")
    assert code == 0, err
    assert json.loads(stdout)["epsilon_target"] == {"a": 2.0, "b": None}
    stored = json.loads((out / "plan.json").read_text())
    stored["groups"][0]["epsilon"] = 10
    (out / "plan.json").write_text(json.dumps(stored))
    code, _, err = gdpfed(capsys, "train", "--out", out, "--resume")
    assert_one_line_error(
        code, err, f"plan: {out / 'plan.json'}: groups.a.epsilon: states 10, but the plan's scenario fixes 2"
    )


def test_the_budget_figures_come_from_the_scenario() -> None:
    """A plan object edited past the reader (no validation) still shows, as each group's or
    silo's budget, the scenario's: what summary.json's epsilon_target and the console print."""
    from planner.schema import Plan
    from planner.units.silo_sample import SiloSamplePlan
    from trainer.units.client.tally import ClientTally
    from trainer.units.silo.run import SiloTally

    plan = Plan.model_validate(client_document())
    edited = plan.model_copy(update={"groups": [plan.groups[0].model_copy(update={"epsilon": 10.0}), *plan.groups[1:]]})
    assert ClientTally(edited).targets() == {"strict": 1.0, "medium": 2.0, "relaxed": 4.0}
    silo = SiloSamplePlan.model_validate(silo_document())
    edited_silo = silo.model_copy(update={"silos": [silo.silos[0].model_copy(update={"epsilon": 10.0}), *silo.silos[1:]]})
    assert SiloTally(edited_silo).targets() == {"a": 1.0, "b": 2.0}


def test_a_rate_edited_without_its_phase_is_one_plain_sentence(capsys, tmp_path: Path) -> None:
    """Issue 25 §4: the refusal named the phase as a Python repr."""
    document = client_document()
    document["groups"][0]["sampling_rate"] = 0.5
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(document))
    code, _, err = gdpfed(capsys, "train", "--plan", path, *TINY, "--out", tmp_path / "never")
    assert_one_line_error(code, err, "groups.strict.phases: this plan's own phase (sampling_rate 0.018",
                          "is not the one it runs (sampling_rate 0.5, noise_multiplier")
    assert "PoissonSampledGaussian" not in err and "kind=" not in err
