"""``gdpfed bench SUITE`` and ``python -m bench SUITE``: run one benchmark suite, print its table.

A suite is a module ``bench.<name>`` with ``run(quick: bool) -> list[tuple[str, list[dict]]]``
(titled tables). ``--quick`` runs fewer repeats and smaller sizes (used by the tests to
check that every suite still runs; the numbers in docs/benchmarks.md come from full runs).
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

SUITES: dict[str, str] = {
    "accounting": "bench.accounting",
    "planner": "bench.planner",
    "service": "bench.service",
    "trainer": "bench.trainer",
    "secagg": "bench.secagg",
    "rounds": "bench.rounds",
    "cli": "bench.startup",
    "flower": "bench.flower",
}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bench",
        description="Run a benchmark suite; gdpfed and its peer run on the same inputs in one process.",
    )
    parser.add_argument("suite", choices=sorted(SUITES), help="which suite to run")
    parser.add_argument("--quick", action="store_true", help="fewer repeats and sizes (smoke run)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.set_defaults(handler=_handle)


def run_suite(name: str, quick: bool) -> list[tuple[str, list[dict[str, Any]]]]:
    module = importlib.import_module(SUITES[name])
    return module.run(quick=quick)


def _handle(args: argparse.Namespace) -> tuple[Any, str]:
    from bench.report import format_table

    tables = run_suite(args.suite, args.quick)
    text = "\n\n".join(format_table(rows, title) for title, rows in tables)
    data = {title: rows for title, rows in tables}
    return data, text
