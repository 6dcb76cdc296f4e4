"""Checkpoints: everything a run needs to continue exactly where it stopped.

A checkpoint holds (docs/trainer.md §Runs, checkpoints and resume): the format version,
the index of the next round to run, the global model parameters, the strategy's state
(server momentum, per-client state, ...), the privacy ledger, the reporter's unsent
rounds, and fingerprints of the plan and configuration it belongs to. No random
generator state is stored because there is none to store: every random draw of round
``t`` comes from a generator seeded by ``(seed, t, purpose)`` (``trainer/rounds.py``),
so the round index *is* the RNG state.

It is written atomically (temporary file + rename): an interrupted write leaves the
previous checkpoint intact. Loading uses ``torch.load(weights_only=True)``: only
tensors and plain Python values, never arbitrary pickled objects.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import torch

from accounting.errors import InvalidInputError
from trainer.run.directory import atomic_write_bytes

CHECKPOINT_FORMAT = 1


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Serialise ``state`` (tensors and plain values) and write it atomically to ``path``."""
    buffer = io.BytesIO()
    torch.save({"format": CHECKPOINT_FORMAT, **state}, buffer)
    atomic_write_bytes(path, buffer.getvalue())


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read a checkpoint written by ``save_checkpoint``; refuse other formats."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError) as exc:
        raise InvalidInputError("resume", f"cannot read checkpoint {path}: {exc}") from exc
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise InvalidInputError("resume", f"{path} is not a gdpfed checkpoint (format {CHECKPOINT_FORMAT})")
    return state
