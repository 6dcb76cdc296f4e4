"""The metric unit's steps of the run loop (``trainer.run.steps``; docs/metric-privacy.md §5).

Its figures are the strategy's own evaluation and the tally's leakage (``metric_*``) on
every round, never an epsilon; the engine holds the tally (it caps participation) and a
radius that the checkpoint keeps; a run checkpoints after every round.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from trainer.run.divergence import Divergence
from trainer.run.metrics import RoundRecord
from trainer.run.outcome import RoundOutcome
from trainer.run.plots import plot_run
from trainer.run.prepared import PreparedRun, RunTally
from trainer.run.reporting import RoundReporter
from trainer.run.steps import Evaluation, RoundSteps
from trainer.run.summary import RunSummary
from trainer.strategies.base import RoundContext
from trainer.units.metric.rounds import MetricRoundEngine
from trainer.units.metric.tally import MetricTally


class MetricSteps(RoundSteps):
    """Metric runs: leakage figures on every round, the engine's radius checkpointed."""

    checkpoint_every_round = True

    @staticmethod
    def _engine(prepared: PreparedRun) -> MetricRoundEngine:
        assert isinstance(prepared.engine, MetricRoundEngine)  # prepare_metric_run builds no other
        return prepared.engine

    def open_tally(self, prepared: PreparedRun, epsilon_fn: Any) -> RunTally:
        return self._engine(prepared).tally  # the engine caps participation on the same tally

    def saved_state(self, prepared: PreparedRun) -> dict[str, Any]:
        return {"mechanism": self._engine(prepared).state_dict()}

    def load_state(self, prepared: PreparedRun, state: dict[str, Any]) -> None:
        self._engine(prepared).load_state_dict(state.get("mechanism", {"radius": prepared.plan.scenario.radius}))

    def evaluate(self, prepared: PreparedRun, ctx: RoundContext, params: torch.Tensor, tally: RunTally,
                 due: bool) -> Evaluation:
        metrics: dict[str, float] = {}
        if due:
            metrics = dict(prepared.strategy.evaluate(ctx, params, prepared.dataset) or {})
        assert isinstance(tally, MetricTally)
        metrics.update({f"metric_{name}": value for name, value in tally.summary().items()})
        return Evaluation(metrics=metrics)

    def divergence_reason(self, finite: bool, evaluation: Evaluation) -> str | None:
        return None if finite else "the hypotheses are not finite"

    def divergence_hint(self, prepared: PreparedRun, outcome: RoundOutcome) -> str:
        return "lower the learning rate or nu; the released models carry noise nu * radius"

    def record(self, outcome: RoundOutcome, tally: RunTally, evaluation: Evaluation, seconds: float,
               timing: dict[str, float], diverged: bool) -> RoundRecord:
        metrics = evaluation.metrics or {}
        return RoundRecord(
            round=outcome.global_round,
            loss=next((v for k, v in metrics.items() if k.endswith("_loss")), None),
            accuracy=next((v for k, v in metrics.items() if k.endswith("_accuracy")), None),
            epsilon_spent={}, aborted_pools=[], sampled=outcome.sampled, survived=outcome.survived,
            dropped_before_masking=0, dropped_after_masking=0, seconds=seconds, timing=timing,
            privacy_unit=tally.privacy_unit, nonfinite_updates=outcome.nonfinite_updates, diverged=diverged,
            metrics={k: float(v) for k, v in metrics.items() if math.isfinite(v)},
        )

    def summary(self, prepared: PreparedRun, records: list[RoundRecord], tally: RunTally, seconds: float,
                plan_id: str | None, reporter: RoundReporter | None, divergence: Divergence | None) -> RunSummary:
        config = prepared.config
        evaluated = [r for r in records if r.loss is not None]
        # the tally counts the rounds of the plan now executed (a followed re-plan's from its start)
        rounds_run = prepared.plan.start_round + tally.rounds_run - prepared.run_start
        return RunSummary(
            run_dir=str(prepared.run_dir.root), method=prepared.plan.method,
            plan_id=reporter.plan_id if reporter is not None else plan_id,
            superseded_plans=list(prepared.plan_history),
            complete=rounds_run == config.rounds, rounds_run=rounds_run, rounds=config.rounds,
            start_round=prepared.run_start, reports_pending=len(reporter.pending) if reporter is not None else 0,
            final_accuracy=evaluated[-1].accuracy if evaluated else None,
            final_loss=evaluated[-1].loss if evaluated else None,
            best_accuracy=max((r.accuracy for r in evaluated if r.accuracy is not None), default=None),
            epsilon_spent={}, epsilon_target={}, aborted_rounds={}, model_dim=prepared.plan.scenario.model_dim,
            device=str(prepared.device), seconds=seconds, diverged=divergence, warnings=list(prepared.warnings),
            privacy_unit=tally.privacy_unit, notion=tally.notion, strategy=config.strategy,
            final_metrics=records[-1].metrics if records else {},
            secagg_execution=prepared.unit.secagg_execution(config),
        )

    def plot(self, prepared: PreparedRun, records: list[RoundRecord], summary: RunSummary) -> None:
        run_dir = prepared.run_dir
        plot_run(
            records, run_dir.accuracy_plot, run_dir.loss_plot, prepared.plan.method, run_dir.local_accuracy_plot,
            privacy_path=run_dir.privacy_plot, notion=summary.notion,
        )
