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
    "discrete": "bench.discrete",
    "rounds": "bench.rounds",
    "cli": "bench.startup",
    "flower": "bench.flower",
    "dpsgd": "bench.dpsgd",
    "audit": "bench.audit",
}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bench",
        description="Run a benchmark suite; gdpfed and its peer run on the same inputs in one process.",
    )
    parser.add_argument("suite", choices=sorted(SUITES), help="which suite to run")
    parser.add_argument("--quick", action="store_true", help="fewer repeats and sizes (smoke run)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument(
        "--device", help="torch device for suites that train (trainer, dpsgd): cpu, cuda, cuda:N, auto (default cpu)"
    )
    parser.set_defaults(handler=_handle)


def run_suite(name: str, quick: bool, device: str | None = None) -> list[tuple[str, list[dict[str, Any]]]]:
    """Run suite ``name``; ``device`` only for suites that declare ``TAKES_DEVICE`` (else refused)."""
    module = importlib.import_module(SUITES[name])
    if device is None:
        return module.run(quick=quick)
    if not getattr(module, "TAKES_DEVICE", False):
        from accounting.errors import InvalidInputError

        raise InvalidInputError("device", f"the {name} suite runs on the CPU only; --device is for the trainer and dpsgd suites")
    return module.run(quick=quick, device=device)


def _handle(args: argparse.Namespace) -> tuple[Any, str]:
    from bench.report import format_table

    tables = run_suite(args.suite, args.quick, args.device)
    text = "\n\n".join(format_table(rows, title) for title, rows in tables)
    # Titles carry measured values (rates, load): a list keeps the JSON's keys the same every run.
    data = [{"title": title, "rows": rows} for title, rows in tables]
    return data, text
