"""``summary.json``: ``RunSummary`` and how the run loop fills it in (docs/trainer.md §Runs,
checkpoints and resume)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from accounting.choices import SecaggMechanism
from trainer.run.divergence import Divergence
from trainer.run.metrics import RoundRecord
from trainer.run.prepared import PreparedRun, RunTally
from trainer.run.reporting import RoundReporter


class RunSummary(BaseModel):
    """``summary.json``: where a run ended up."""

    run_dir: str
    method: str
    plan_id: str | None = Field(description="the service's plan the run ended on (it may have followed re-plans)")
    superseded_plans: list[str] = Field(
        default_factory=list, description="ids of the plans this run followed before plan_id, oldest first"
    )
    complete: bool
    rounds_run: int = Field(description="rounds this run completed")
    rounds: int = Field(description="rounds this run was asked for")
    start_round: int
    final_accuracy: float | None
    final_loss: float | None
    best_accuracy: float | None
    epsilon_spent: dict[str, float | None] = Field(
        description="group id -> epsilon spent over all phases, under the plan's accountant"
    )
    epsilon_rdp: dict[str, float | None] = Field(
        default_factory=dict, description="group id -> the same history's epsilon under rdp (docs/ledger.md §3)"
    )
    epsilon_tight: dict[str, float | None] = Field(
        default_factory=dict, description="group id -> the same history's epsilon under the tight accountant (pld)"
    )
    epsilon_target: dict[str, float | None] = Field(
        description="each group's budget, as the scenario of the plan the run ended on fixes it"
    )
    aborted_rounds: dict[str, int] = Field(description="pool id -> rounds it released nothing")
    model_dim: int
    device: str
    seconds: float = Field(description="wall-clock seconds of this process's rounds")
    reports_pending: int = 0
    notion: str = Field("client-level (epsilon, delta)-DP per group", description="the privacy notion of every epsilon here")
    diverged: Divergence | None = Field(
        None, description="set when a round left the model non-finite and the run stopped after it"
    )
    warnings: list[str] = Field(default_factory=list)
    privacy_unit: str = Field("client", description="the notion of epsilon_spent: client = client-level DP per group")
    strategy: str = Field("plan", description="the training strategy that ran")
    final_metrics: dict[str, float] = Field(
        default_factory=dict, description="the strategy's own evaluation at the last evaluated round"
    )
    accuracy_by_group: dict[str, float | None] | None = Field(
        None,
        description="group id -> mean over its clients of the global model's accuracy on each client's own test "
        "data, last evaluated round (null without local test data; docs/trainer.md §Evaluation)",
    )
    personal_accuracy_by_group: dict[str, float | None] | None = Field(
        None, description="group id -> the same for the clients' personal models (strategies that keep them)"
    )
    personal_accuracy: float | None = Field(
        None, description="mean over all clients of their personal model's accuracy on their own test data"
    )
    secagg_execution: str | None = Field(
        "protocol", description="protocol (real secure aggregation) or exact_sum; null: the run's mechanism uses none (silo and metric runs)"
    )
    # Left out at None so that the summaries of runs on the default (continuous) mechanism keep their bytes.
    secagg_mechanism: SecaggMechanism | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="skellam when the pools' secure aggregation carried the plan's distributed Skellam noise "
        "(exact; docs/secure-aggregation.md §Discrete noise); absent: the continuous Gaussian (approximate), "
        "or a unit without secure aggregation",
    )
    gradient_path: str | None = Field(
        None, description="silo runs: the DP-SGD path that computed the clipped per-example gradient sums, ghost "
        "(ghost clipping) or torch.func (docs/mrmtl.md §4.1); null for other runs"
    )
    secagg_graphs: dict[str, list[str]] = Field(
        default_factory=dict, description="pool id -> the graphs its sessions ran (full, sparse k=.. t=..)"
    )
    secagg_full_reasons: dict[str, str] = Field(
        default_factory=dict,
        description="pool id -> why its sessions run full mode where SecAgg+ was asked for or weighed (no Harary "
        "graph meets the bounds; auto: SecAgg+ k=.. saves < 4x); the plan states the graph, not this",
    )
    secagg_workers: int | None = Field(
        None,
        description="the most processes a secure-aggregation session of this run could use (secagg_workers, or "
        "under auto the cores available; a session too small to pay runs in 1); null: no protocol ran "
        "(exact_sum, silo and metric runs)",
    )


def summarize(
    prepared: PreparedRun,
    records: list[RoundRecord],
    tally: RunTally,
    seconds: float,
    plan_id: str | None,
    reporter: RoundReporter | None,
    divergence: Divergence | None = None,
) -> RunSummary:
    plan = prepared.plan
    evaluated = [r for r in records if r.loss is not None]
    pool_ids = [pool.id for pool in getattr(plan, "pools", [])]
    pool_ids += sorted({p for r in records for p in r.aborted_pools} - set(pool_ids))
    aborted = {pool_id: sum(pool_id in r.aborted_pools for r in records) for pool_id in pool_ids}
    rounds_run = prepared.plan.start_round + tally.rounds_run - prepared.run_start
    return RunSummary(
        run_dir=str(prepared.run_dir.root),
        method=plan.method,
        plan_id=reporter.plan_id if reporter is not None else plan_id,
        superseded_plans=list(prepared.plan_history),
        complete=rounds_run == prepared.config.rounds and divergence is None,
        rounds_run=rounds_run,
        rounds=prepared.config.rounds,
        start_round=prepared.run_start,
        final_accuracy=evaluated[-1].accuracy if evaluated else None,
        final_loss=evaluated[-1].loss if evaluated else None,
        best_accuracy=max((r.accuracy for r in evaluated if r.accuracy is not None), default=None),
        epsilon_spent=tally.final_spent(),
        **figure_fields(tally),
        epsilon_target=tally.targets(),
        notion=tally.notion,
        aborted_rounds=aborted,
        model_dim=prepared.engine.dim,
        device=str(prepared.device),
        seconds=seconds,
        reports_pending=len(reporter.pending) if reporter is not None else 0,
        diverged=divergence,
        warnings=prepared.warnings,
        privacy_unit=plan.privacy_unit,
        strategy=prepared.config.strategy,
        final_metrics=evaluated[-1].metrics if evaluated else {},
        **personal_fields(evaluated[-1] if evaluated else None),
        secagg_execution=prepared.unit.secagg_execution(prepared.config),
        gradient_path=prepared.gradient_path,
        secagg_graphs={
            pool_id: list(dict.fromkeys(r.secagg[pool_id] for r in records if pool_id in r.secagg))
            for pool_id in pool_ids
        },
        # secagg_workers and secagg_full_reasons: the client unit's steps fill them in
        secagg_workers=None,
        secagg_full_reasons={},
    )


def personal_fields(record: RoundRecord | None) -> dict[str, Any]:
    """The summary's by-group and personal accuracies from the last evaluated round.

    ``accuracy_by_group`` is the run's own evaluation (``RoundRecord.accuracy_by_group``);
    the personal ones are the strategy's metrics named ``personal_accuracy`` and
    ``personal_accuracy.<group id>`` (``Strategy.evaluate``'s convention for strategies
    with personal models, docs/trainer.md §Strategies).
    """
    if record is None:
        return {}
    prefix = "personal_accuracy."
    personal = {name[len(prefix):]: value for name, value in record.metrics.items() if name.startswith(prefix)}
    return {
        "accuracy_by_group": dict(record.accuracy_by_group) or None,
        "personal_accuracy_by_group": personal or None,
        "personal_accuracy": record.metrics.get("personal_accuracy"),
    }


def figure_fields(tally: RunTally) -> dict[str, dict[str, float | None]]:
    """The summary's ``epsilon_rdp`` and ``epsilon_tight`` (the ledger's ``final_figures``,
    i.e. ``planner.ledger.epsilon_figures``); none for a ledger whose notion is no epsilon."""
    figures = tally.final_figures()
    if not figures:
        return {}
    return {
        "epsilon_rdp": {k: (f.rdp if f is not None else None) for k, f in figures.items()},
        "epsilon_tight": {k: (f.tight if f is not None else None) for k, f in figures.items()},
    }
