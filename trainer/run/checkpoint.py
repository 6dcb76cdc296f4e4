"""Checkpoints: everything a run needs to continue exactly where it stopped.

A checkpoint holds (docs/trainer.md §Runs, checkpoints and resume): the format version,
the index of the next round to run, the global model parameters, the strategy's state
(server momentum, per-client state, ...), the privacy ledger, the reporter's unsent
rounds, and fingerprints of the plan and configuration it belongs to. No random
generator state is stored because there is none to store: every random draw of round
``t`` comes from a generator seeded by ``(seed, t, purpose)`` (``trainer/units/client/rounds.py``),
so the round index *is* the RNG state.

It is written atomically (temporary file + rename): an interrupted write leaves the
previous checkpoint intact. Loading uses ``torch.load(weights_only=True)``: only
tensors and plain Python values, never arbitrary pickled objects.
"""

from __future__ import annotations

import io
import pickle
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
    except pickle.UnpicklingError:  # neither a zip archive nor a pickle torch.load accepts (torch's text is many lines)
        raise InvalidInputError("resume", f"cannot read checkpoint {path}: not a torch checkpoint (damaged or another file)") from None
    except Exception as exc:  # a truncated or damaged file fails in many ways; each is bad input
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise InvalidInputError("resume", f"cannot read checkpoint {path}: {reason}") from exc
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise InvalidInputError("resume", f"{path} is not a gdpfed checkpoint (format {CHECKPOINT_FORMAT})")
    return state
