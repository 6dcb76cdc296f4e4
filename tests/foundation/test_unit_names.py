"""A privacy unit is named, as a value, only in its homes and its registries (issue 28;
docs/architecture.md §Privacy units).

Code outside ``trainer/units/`` and the experiment runner's unit registries
(``trainer/experiments/units.py`` ``EXPERIMENT_UNITS``, ``trainer/experiments/cell.py``
``CELL_RUNS``) that needs a unit asks the unit object (``planner.units``,
``trainer.units.registry``) instead of comparing, keying or defaulting on its name: a
string literal that is a unit's name there is a branch a new unit would have to find.
Prose (docstrings, comments, and messages that mention a unit among other words) may
name a unit. ``client`` is the default unit and a common word, so it is not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

from planner.units import UNITS

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "trainer")
HOMES = ("trainer/units/",)
REGISTRIES = ("trainer/experiments/units.py", "trainer/experiments/cell.py")


def unit_name_literals(root: Path = ROOT, names: tuple[str, ...] | None = None) -> list[str]:
    """``path:line name`` for each string literal outside the homes and registries that is a
    unit's name (every unit of ``planner.units.UNITS`` but ``client``)."""
    names = names or tuple(name for name in UNITS if name != "client")
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if relative.startswith(HOMES) or relative in REGISTRIES:
                continue
            for node in ast.walk(ast.parse(path.read_text(), filename=relative)):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                    found.append(f"{relative}:{node.lineno} {node.value}")
    return found


def test_no_unit_is_named_outside_its_homes_and_registries():
    assert unit_name_literals() == []


def test_the_count_sees_a_comparison_on_a_unit_name(tmp_path):
    (tmp_path / "trainer" / "run").mkdir(parents=True)
    (tmp_path / "trainer" / "units" / "silo").mkdir(parents=True)
    (tmp_path / "app").mkdir()
    (tmp_path / "trainer" / "run" / "options.py").write_text(
        '"""Prose may say silo_sample."""\nentity = "silo" if unit == "silo_sample" else "group"\n'
    )
    (tmp_path / "trainer" / "units" / "silo" / "unit.py").write_text('NAME = "silo_sample"\n')
    (tmp_path / "app" / "x.py").write_text('MESSAGE = "for client and metric_local plans"\n')
    assert unit_name_literals(tmp_path, ("silo_sample", "metric_local")) == ["trainer/run/options.py:2 silo_sample"]


def test_the_console_summary_names_a_silo_plans_entities_silos():
    """``gdpfed train``'s summary lines take the entity from the planner's unit, not its name."""
    from trainer.run.options import format_summary
    from trainer.run.summary import RunSummary

    def lines(privacy_unit: str) -> list[str]:
        summary = RunSummary(
            run_dir="r", method="m", plan_id=None, complete=True, rounds_run=1, rounds=1, start_round=0,
            final_accuracy=None, final_loss=None, best_accuracy=None, epsilon_spent={"a": 0.5},
            epsilon_target={"a": 1.0}, aborted_rounds={}, model_dim=1, device="cpu", seconds=1.0,
            privacy_unit=privacy_unit,
        )
        return [line for line in format_summary(summary).splitlines() if "epsilon spent" in line]

    assert lines("silo_sample") == ["silo a: epsilon spent 0.5 of 1"]
    assert lines("client") == ["group a: epsilon spent 0.5 of 1"]
