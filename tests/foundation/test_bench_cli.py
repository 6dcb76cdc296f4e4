"""``gdpfed bench cli`` runs every subcommand once (quick mode); its numbers live in docs/benchmarks.md."""

from __future__ import annotations

from app.cli import SUBCOMMAND_MODULES
from bench.startup import run


def test_cli_benchmark_times_every_subcommand_against_python() -> None:
    [(title, rows)] = run(quick=True)
    assert "load average" in title
    commands = [row["command"] for row in rows]
    assert commands[0] == "python -c pass" and rows[0]["ratio_to_python"] == 1
    assert "gdpfed --help" in commands and "gdpfed account epsilon ..." in commands
    assert {f"gdpfed {name} --help" for name in SUBCOMMAND_MODULES} <= set(commands)
    assert all(row["median_s"] > 0 and row["repeats"] == 1 for row in rows)
