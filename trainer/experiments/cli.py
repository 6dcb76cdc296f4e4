"""``gdpfed experiment CONFIG.yaml``: run a grid of training runs, or a planner sweep.

(docs/results.md §Runner.) torch is imported only inside the handler.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "experiment",
        description="Run every cell of an experiment configuration (experiments/*.yaml), skipping cells "
        "already complete in --out, then write results.csv, results.md and accuracy.png.",
    )
    parser.add_argument("config", type=Path, help="experiment configuration (YAML)")
    parser.add_argument("--out", type=Path, help="output directory (default results/<experiment name>[-smoke])")
    parser.add_argument("--jobs", type=int, default=1, help="cells run in parallel processes (default 1)")
    parser.add_argument("--smoke", action="store_true", help="shrink every cell (rounds, clients) to run in seconds")
    parser.add_argument("--only", action="append", metavar="CELL_ID", help="run only this cell (repeatable)")
    parser.add_argument("--force", action="store_true", help="re-run chosen cells even if already complete")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(handler=handle_experiment)


def handle_experiment(args: argparse.Namespace) -> tuple[Any, str]:
    import torch  # noqa: F401  (fail before any output when the trainer extra is missing)

    # start-up time: gdpfed loads the experiment runner (torch) only for this subcommand
    from trainer.experiments.config import load_experiment
    from trainer.experiments.runner import run_experiment

    out = args.out
    if out is None:
        name = load_experiment(args.config).name
        out = Path("results") / (f"{name}-smoke" if args.smoke else name)
    summary = run_experiment(
        args.config, out, jobs=args.jobs, smoke=args.smoke, only=args.only, force=args.force
    )
    text = (
        f"{summary.experiment}: ran {len(summary.ran)} cell(s), {len(summary.skipped)} already complete, "
        f"{summary.seconds:.1f}s\n" + "\n".join(f"wrote {f}" for f in summary.files)
    )
    return summary, text
