"""A round's line in ``rounds.jsonl`` (``RoundRecord``) from what its engine, ledger and
evaluation gave, and the metrics a round reports to the service (docs/trainer.md §Runs,
checkpoints and resume; docs/ledger.md §6)."""

from __future__ import annotations

import math

from trainer.run.metrics import RoundRecord
from trainer.run.outcome import RoundOutcome
from trainer.run.prepared import RunTally


def round_record(
    outcome: RoundOutcome,
    tally: RunTally,
    metrics: dict[str, float] | None,
    seconds: float,
    timing: dict[str, float],
    diverged: bool = False,
    strategy_metrics: dict[str, float] | None = None,
    accuracy_by_group: dict[str, float | None] | None = None,
) -> RoundRecord:
    return RoundRecord(
        round=outcome.global_round,
        loss=None if metrics is None else metrics["loss"],
        accuracy=None if metrics is None else metrics.get("accuracy"),
        epsilon_spent=tally.spent(),
        privacy_unit=tally.privacy_unit,
        aborted_pools=outcome.aborted_pools,
        abort_reasons={pool: outcome.abort_reasons.get(pool, "aborted") for pool in outcome.aborted_pools},
        sampled=outcome.sampled,
        survived=outcome.survived,
        dropped_before_masking=outcome.dropped_before_masking,
        dropped_after_masking=outcome.dropped_after_masking,
        seconds=seconds,
        timing=timing,
        nonfinite_updates=outcome.nonfinite_updates,
        diverged=diverged,
        # the evaluator's further figures (silo runs: per-silo accuracies) and the strategy's own
        metrics={name: float(value) for name, value in (metrics or {}).items() if name not in ("loss", "accuracy")}
        | {name: float(value) for name, value in (strategy_metrics or {}).items()},
        accuracy_by_group=dict(accuracy_by_group or {}),
        secagg=outcome.secagg,
        clip_norm=outcome.clip_norm,
        unclipped_fraction=outcome.unclipped_fraction,
    )


def report_metrics(record: RoundRecord) -> dict[str, float]:
    """The ``metrics`` posted to the service for a round: a flat name -> finite number map.

    ``loss``/``accuracy`` on evaluated rounds, ``epsilon.<group>`` for private groups
    (names longer than the service's 64 characters are left out), client counts, seconds,
    and ``diverged: 1`` on the round that stopped a diverged run.
    """
    metrics: dict[str, float] = {
        "sampled": float(sum(record.sampled.values())),
        "survived": float(sum(record.survived.values())),
        "seconds": float(record.seconds),
    }
    if record.diverged:
        metrics["diverged"] = 1.0
    if record.loss is not None and math.isfinite(record.loss):
        metrics["loss"] = float(record.loss)
    if record.accuracy is not None:
        metrics["accuracy"] = float(record.accuracy)
    for group, value in record.accuracy_by_group.items():
        name = f"accuracy.{group}"
        if value is not None and len(name) <= 64 and len(metrics) < 256:
            metrics[name] = float(value)
    for group, spent in record.epsilon_spent.items():
        name = f"epsilon.{group}"
        if spent is not None and math.isfinite(spent) and len(name) <= 64 and len(metrics) < 256:
            metrics[name] = float(spent)
    for name, value in record.metrics.items():  # the strategy's own; never over the above
        if name not in metrics and math.isfinite(value) and len(name) <= 64 and len(metrics) < 256:
            metrics[name] = float(value)
    return metrics
