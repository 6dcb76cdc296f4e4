"""``RoundOutcome``: what one round of any privacy unit's round engine did, the raw
material of its ``RoundRecord`` (docs/trainer.md §Layout)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class RoundOutcome:
    """What one round did (the raw material of a ``RoundRecord``)."""

    global_round: int
    sampled: dict[str, int]
    survived: dict[str, int]
    aborted_pools: list[str]
    abort_reasons: dict[str, str]
    dropped_before_masking: int
    dropped_after_masking: int
    timing: dict[str, float]
    pool_sums: dict[str, np.ndarray | None] = field(default_factory=dict)
    nonfinite_updates: int = 0  # clients that sent zeros because local training diverged
    # pool id -> the graph its session ran ("full", "sparse k=32 t=31"); absent when too few sampled
    secagg: dict[str, str] = field(default_factory=dict)
    keystream_bytes: int = 0  # mask keystream this round's sessions expanded (0 with exact_sum)
    # adaptive clipping: the round's clip norm S^t and the noisy unclipped share b_bar it released
    clip_norm: float | None = None
    unclipped_fraction: float | None = None
    # group id -> the clients that released this round (units whose ledger counts
    # participations: the metric unit); None where the round engine does not count them
    participants: dict[str, list[int]] | None = None
