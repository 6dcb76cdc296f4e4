"""Training runs: run directory, checkpoints, metrics log, ledger, plots, progress, reporting
(docs/trainer.md §Runs, checkpoints and resume).

The runner (and with it torch) is imported on first use of its names, so that the
torch-free modules here (``directory``, ``reporting``) load without it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PreparedRun", "RunSummary", "TrainConfig", "execute_run", "prepare_run"]
_HOMES = {"PreparedRun": "prepared", "RunSummary": "summary", "TrainConfig": "config", "execute_run": "runner",
          "prepare_run": "runner"}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(f"trainer.run.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
