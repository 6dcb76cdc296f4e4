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
    # issue 26: a whole plan and a refused train (exit 2, checked by run) are timed too
    assert "gdpfed plan examples/scenario.json" in commands and "gdpfed train (refused: --lr -1)" in commands
    # ... beside the third-party imports a plan cannot start without (its floor)
    assert commands.index("python -c 'import numpy, pydantic, scipy.optimize'") + 1 == commands.index(
        "gdpfed plan examples/scenario.json"
    )
    assert {f"gdpfed {name} --help" for name in SUBCOMMAND_MODULES} <= set(commands)
    # a question refused for a bad value (exit 2, checked by run), and each row's CPU seconds
    assert "gdpfed account epsilon (refused: --sampling-rate abc)" in commands
    # issue 26 §3's 0.25 s is for every account question: each is timed
    for question in ("noise-multiplier ...", "rounds ...", "sampling-rate ...", "epsilon ... --accountant rdp"):
        assert f"gdpfed account {question}" in commands
    assert all(row["median_s"] > 0 and row["cpu_s"] > 0 and row["repeats"] == 1 for row in rows)


def test_bench_json_keys_do_not_carry_measured_titles(monkeypatch) -> None:
    """--json is a list of {title, rows}: a title holds measured values, so it must not be a key."""
    import argparse

    import bench.cli

    tables = [("Suite (load average 0.5)", [{"x": 1}]), ("Other (2.9 GB/s)", [{"y": 2}])]
    monkeypatch.setattr(bench.cli, "run_suite", lambda name, quick, device=None: tables)
    data, text = bench.cli._handle(argparse.Namespace(suite="rounds", quick=True, device=None))
    assert data == [{"title": "Suite (load average 0.5)", "rows": [{"x": 1}]},
                    {"title": "Other (2.9 GB/s)", "rows": [{"y": 2}]}]
    assert "Suite (load average 0.5)" in text
