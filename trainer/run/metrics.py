"""The per-round metrics log ``rounds.jsonl`` (docs/trainer.md §Runs, checkpoints and resume).

One JSON object per completed round, appended and fsynced after the round and before
its checkpoint. On resume, lines for rounds at or after the checkpoint's next round are
dropped (they were logged by rounds whose checkpoint never landed and will be re-run),
so a resumed log has every round exactly once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel, Field

from trainer.run.directory import atomic_write_bytes


class RoundRecord(BaseModel):
    """What one round did and what it cost."""

    round: int = Field(description="global round index (plan start_round + rounds run in this plan)")
    loss: float | None = Field(None, description="test loss; null on rounds without evaluation")
    accuracy: float | None = Field(None, description="test accuracy; null on rounds without evaluation")
    epsilon_spent: dict[str, float | None] = Field(
        description="group id -> epsilon spent after this round (all phases, accountant of "
        "the plan); null = no DP for this group"
    )
    aborted_pools: list[str] = Field(description="pools that released nothing this round")
    abort_reasons: dict[str, str] = Field(
        default_factory=dict, description="aborted pool id -> why it released nothing (too few sampled, "
        "too few survivors, a protocol abort)"
    )
    sampled: dict[str, int] = Field(description="group id -> clients Poisson-sampled")
    survived: dict[str, int] = Field(description="pool id -> clients whose inputs are in the released sum")
    dropped_before_masking: int
    dropped_after_masking: int
    privacy_unit: str = Field("client", description="whom epsilon_spent protects: client (groups) or silo_sample (silos)")
    seconds: float = Field(description="wall-clock seconds of the round")
    timing: dict[str, float] = Field(
        default_factory=dict, description="seconds per stage: train, privatize, secagg, aggregate, account, evaluate"
    )
    nonfinite_updates: int = Field(
        0, description="clients whose local training produced non-finite values and sent a zero update instead"
    )
    diverged: bool = Field(
        False, description="the global parameters or test loss after this round are not finite: the run stopped here"
    )
    metrics: dict[str, float] = Field(
        default_factory=dict,
        description="further evaluation figures on evaluated rounds: the strategy's own (Strategy.evaluate, "
        "e.g. personal accuracy); silo runs: accuracy.<silo>, loss.<silo>",
    )
    accuracy_by_group: dict[str, float | None] = Field(
        default_factory=dict,
        description="evaluated rounds of data with local test sets: group id -> mean over its clients of the "
        "global model's accuracy on each client's own test data",
    )
    secagg: dict[str, str] = Field(
        default_factory=dict, description="pool id -> the graph its session ran: full or sparse k=.. t=.."
    )
    clip_norm: float | None = Field(
        None, description="adaptive clipping: the clip norm S^t this round ran with; null with fixed clipping"
    )
    unclipped_fraction: float | None = Field(
        None, description="adaptive clipping: the noisy share b_bar of unclipped clients the round released"
    )


def append_round(path: Path, record: RoundRecord) -> None:
    """Append one line and fsync it, so a logged round survives a crash."""
    with path.open("a", encoding="utf-8") as handle:
        handle.write(record.model_dump_json() + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_rounds(path: Path) -> list[RoundRecord]:
    """Every complete line of the log (a torn last line from a crash is ignored)."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            records.append(RoundRecord.model_validate(json.loads(line)))
        except (json.JSONDecodeError, ValueError):
            break
    return records


def truncate_rounds(path: Path, before_round: int) -> list[RoundRecord]:
    """Keep only records with ``round < before_round`` (atomically); return them."""
    kept = [r for r in read_rounds(path) if r.round < before_round]
    atomic_write_bytes(path, "".join(r.model_dump_json() + "\n" for r in kept).encode())
    return kept
