"""The run directory: where a training run keeps its plan, log, summary, plots and checkpoints.

Layout (docs/trainer.md §Runs, checkpoints and resume)::

    OUT/plan.json          the plan executed (exactly as loaded)
    OUT/config.json        the run configuration (no secrets: the API key is never written)
    OUT/rounds.jsonl       one JSON line per completed round
    OUT/summary.json       final (or latest) summary
    OUT/accuracy.png, OUT/loss.png
    OUT/checkpoint.pt      the last checkpoint

Every file except the append-only log is written atomically: to a temporary file in the
same directory, flushed and fsynced, then renamed over the target, so a crash leaves
either the old or the new version, never a torn one.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accounting.errors import InvalidInputError


def fingerprint(value: Any) -> str:
    """SHA-256 of the canonical JSON of ``value`` (ties a checkpoint to its plan and config)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary sibling and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
        raise


def atomic_write_json(path: Path, value: Any) -> None:
    atomic_write_bytes(path, (json.dumps(value, indent=2, sort_keys=False) + "\n").encode())


@dataclass(frozen=True)
class RunDirectory:
    """Paths of one run directory."""

    root: Path

    @property
    def plan(self) -> Path:
        return self.root / "plan.json"

    @property
    def config(self) -> Path:
        return self.root / "config.json"

    @property
    def reporting(self) -> Path:
        """Where the run reports (service URL and first plan id; never the API key)."""
        return self.root / "reporting.json"

    @property
    def rounds(self) -> Path:
        return self.root / "rounds.jsonl"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint.pt"

    @property
    def accuracy_plot(self) -> Path:
        return self.root / "accuracy.png"

    @property
    def loss_plot(self) -> Path:
        return self.root / "loss.png"

    @property
    def privacy_plot(self) -> Path:
        """Each group's epsilon spent over the rounds against its budget."""
        return self.root / "privacy.png"

    @property
    def local_accuracy_plot(self) -> Path:
        """Per-group accuracy on the clients' own test data (runs with local test data)."""
        return self.root / "local_accuracy.png"

    def has_checkpoint(self) -> bool:
        return self.checkpoint.is_file()


def check_creatable_directory(root: Path, field: str) -> None:
    """Refuse a directory path that ``mkdir(parents=True, exist_ok=True)`` cannot create because
    it, or the nearest of its parents that exists, is a file: its ``FileExistsError`` or
    ``NotADirectoryError`` was a traceback (exit 1), raised once the inputs were all read."""
    if root.exists() and not root.is_dir():
        raise InvalidInputError(field, f"{root} exists and is not a directory")
    ancestor = root.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if ancestor.exists() and not ancestor.is_dir():
        raise InvalidInputError(field, f"{root} cannot be created: {ancestor} is a file, not a directory")


def check_new_run_directory(root: Path, *, field: str = "out",
                            advice: str = "pass --resume to continue the run there, or another --out") -> None:
    """Refuse to start a fresh run in a directory that already holds a run or files.

    Nothing is created here: the caller validates every input first and creates the
    directory only when the run is about to start. ``field`` and ``advice`` are in the
    caller's words (``gdpfed train``'s options by default; a Flower run's run config).
    """
    check_creatable_directory(root, field)
    if root.is_dir() and any(root.iterdir()):
        raise InvalidInputError(field, f"{root} is not empty; {advice}")


def check_resumable_run_directory(root: Path) -> RunDirectory:
    """The run directory to resume, or an error saying why it cannot be resumed."""
    run_dir = RunDirectory(root)
    if not root.is_dir():
        raise InvalidInputError("resume", f"no run directory at {root}")
    for path in (run_dir.plan, run_dir.config):
        if not path.is_file():
            raise InvalidInputError("resume", f"{path} is missing: {root} is not a gdpfed run directory")
    return run_dir
