"""The run loop's unit-specific steps (docs/trainer.md §Layout): what a round's
evaluation, line in ``rounds.jsonl``, divergence check, checkpoint extras, summary and
plots are for a privacy unit.

``RoundSteps`` holds the behaviour of the units that train one model evaluated on the
dataset's test set or by the run's ``evaluator`` (client and silo runs); a unit whose
figures differ (the metric unit's leakage) overrides the steps that differ. The loop
itself (``trainer.runner``) is the same for every unit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from trainer.run.divergence import Divergence
from trainer.run.metrics import RoundRecord
from trainer.run.outcome import RoundOutcome
from trainer.run.plots import chance_level, plot_run
from trainer.run.preparation import accuracy_by_group
from trainer.run.prepared import PreparedRun, RunTally
from trainer.run.records import round_record
from trainer.run.reporting import RoundReporter
from trainer.run.summary import RunSummary, summarize
from trainer.strategies.base import RoundContext


@dataclass
class Evaluation:
    """A round's evaluation: the evaluator's figures (``loss``, ``accuracy``, ...), the
    strategy's own, and the global model's accuracy per group on the clients' own tests."""

    metrics: dict[str, float] | None = None
    strategy_metrics: dict[str, float] | None = None
    accuracy_by_group: dict[str, float | None] = field(default_factory=dict)


class RoundSteps:
    """The steps of the one run loop, as the units that train one evaluated model run them."""

    # checkpoint after every round whatever ``checkpoint_every`` says
    checkpoint_every_round = False

    def open_tally(self, prepared: PreparedRun, epsilon_fn: Any) -> RunTally:
        """The run's tally, fresh (a resumed run loads the checkpoint's state into it)."""
        return prepared.unit.tally(prepared.plan, epsilon_fn)

    def saved_state(self, prepared: PreparedRun) -> dict[str, Any]:
        """The unit's further checkpoint entries (beside parameters, strategy and tally)."""
        return {}

    def load_state(self, prepared: PreparedRun, state: dict[str, Any]) -> None:
        """Restore what ``saved_state`` wrote, from a checkpoint's ``state``."""

    def evaluate(self, prepared: PreparedRun, ctx: RoundContext, params: torch.Tensor, tally: RunTally,
                 due: bool) -> Evaluation:
        """The round's evaluation; nothing unless ``due`` (an evaluation round, finite parameters)."""
        if not due:
            return Evaluation()
        if prepared.evaluator is not None:
            return Evaluation(metrics=prepared.evaluator(params))
        from trainer.engines import evaluate  # start-up time: torch.func and the engines load on the first round

        local: dict[str, float | None] = {}
        metrics = evaluate(prepared.model, params, prepared.dataset.test)
        if prepared.dataset.has_client_tests:
            local = accuracy_by_group(prepared.model, params, prepared.dataset, prepared.population)
        strategy_metrics = prepared.strategy.evaluate(ctx, params, prepared.dataset)
        return Evaluation(metrics, strategy_metrics, local)

    def divergence_reason(self, finite: bool, evaluation: Evaluation) -> str | None:
        """Why the run stops after this round (non-finite parameters or test loss); ``None``: it goes on."""
        if not finite:
            return "the global parameters are not finite"
        if evaluation.metrics is not None and not math.isfinite(evaluation.metrics["loss"]):
            return f"the test loss is {evaluation.metrics['loss']}"
        return None

    def divergence_hint(self, prepared: PreparedRun, outcome: RoundOutcome) -> str:
        """What to change after a divergence (docs/trainer.md §Divergence)."""
        return f"lower --lr (now {prepared.config.lr:g}) or the plan's clip norm"

    def record(self, outcome: RoundOutcome, tally: RunTally, evaluation: Evaluation, seconds: float,
               timing: dict[str, float], diverged: bool) -> RoundRecord:
        """The round's line in ``rounds.jsonl``."""
        return round_record(
            outcome, tally, evaluation.metrics, seconds, timing, diverged=diverged,
            strategy_metrics=evaluation.strategy_metrics, accuracy_by_group=evaluation.accuracy_by_group,
        )

    def summary(self, prepared: PreparedRun, records: list[RoundRecord], tally: RunTally, seconds: float,
                plan_id: str | None, reporter: RoundReporter | None, divergence: Divergence | None) -> RunSummary:
        """``summary.json``."""
        return summarize(prepared, records, tally, seconds, plan_id, reporter, divergence)

    def plot(self, prepared: PreparedRun, records: list[RoundRecord], summary: RunSummary) -> None:
        """The run's plots (accuracy, loss, local accuracy, privacy spent)."""
        run_dir = prepared.run_dir
        chance = prepared.chance
        if chance is None:
            chance = chance_level(getattr(prepared.dataset, "test_y", None), getattr(prepared.dataset, "task", ""))
        plot_run(
            records, run_dir.accuracy_plot, run_dir.loss_plot, prepared.plan.method, run_dir.local_accuracy_plot,
            chance=chance, privacy_path=run_dir.privacy_plot, budgets=summary.epsilon_target, notion=summary.notion,
        )
