"""Training runs: run directory, checkpoints, metrics log, ledger, plots, progress, reporting
(docs/trainer.md §Runs, checkpoints and resume)."""

from trainer.run.runner import PreparedRun, RunSummary, TrainConfig, execute_run, prepare_run

__all__ = ["PreparedRun", "RunSummary", "TrainConfig", "execute_run", "prepare_run"]
