"""Training runs: run directory, checkpoints, metrics log, ledger, plots, progress, reporting
(docs/trainer.md §Runs, checkpoints and resume).

The runner (and with it torch) is imported on first use of its names, so that the
torch-free modules here (``directory``, ``reporting``) load without it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PreparedRun", "RunSummary", "TrainConfig", "execute_run", "prepare_run"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from trainer.run import runner

        return getattr(runner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
