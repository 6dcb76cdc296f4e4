"""Next-character prediction, one client per speaking role (``docs/trainer.md``, "shakespeare").

LEAF's Shakespeare task built from a plain-text file of plays. The text is cut into
blocks at blank lines; a block whose first line is a speaker name ending with a colon
(``First Citizen:``) is a speech of that role. A role's speeches are joined with single
spaces (line breaks become spaces) into one text; its first ``1 - test_fraction`` of
characters gives the training windows, the rest the test windows. A sample is a window
of ``sequence_length`` characters and its label is the character that follows.

The vocabulary is fixed: the 95 printable ASCII characters (codes 32..126); any other
character becomes a space. Windows never cross from one role into another. Roles with
fewer than ``min_samples`` training windows are dropped.

The training rows are a view (``unfold``) of one byte string of all roles' training
texts, so a million windows cost one megabyte.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

from accounting.errors import InvalidInputError
from trainer.data.dataset import FederatedDataset
from trainer.data.federate import federate

VOCAB = "".join(chr(code) for code in range(32, 127))
_SPEAKER = re.compile(r"^[A-Za-z][A-Za-z0-9 ,.'&-]*:$")
_BLOCK_SEPARATOR = re.compile(r"\n[ \t]*\n")
_OUTSIDE_VOCAB = re.compile(r"[^\x20-\x7e]")


def parse_roles(text: str) -> dict[str, str]:
    """Role name -> that role's speeches joined by spaces, in order of first appearance."""
    roles: dict[str, list[str]] = {}
    for block in _BLOCK_SEPARATOR.split(text.replace("\r\n", "\n")):
        lines = [line.strip() for line in block.strip("\n").split("\n")]
        if len(lines) < 2 or not _SPEAKER.match(lines[0]):
            continue
        speech = " ".join(line for line in lines[1:] if line)
        if speech:
            roles.setdefault(lines[0][:-1].strip(), []).append(speech)
    return {role: " ".join(speeches) for role, speeches in roles.items()}


def encode(text: str) -> np.ndarray:
    """Character codes into ``VOCAB`` (uint8); characters outside it become spaces."""
    ascii_text = _OUTSIDE_VOCAB.sub(" ", text)
    return np.frombuffer(ascii_text.encode("ascii"), dtype=np.uint8) - 32


def load_shakespeare(
    path: str | Path,
    *,
    num_clients: int,
    partition: str,
    alpha: float,
    seed: int,
    sequence_length: int = 80,
    min_samples: int = 64,
    test_fraction: float = 0.1,
    max_test_samples: int | None = None,
    client_test_fraction: float = 0.0,
) -> FederatedDataset:
    """The plays at ``path`` as a next-character dataset.

    With ``partition='natural'`` the ``num_clients`` roles with the most training windows
    are the clients (fewer eligible roles is an error naming ``num_clients``).
    """
    if sequence_length < 1:
        raise InvalidInputError("sequence_length", f"must be at least 1, got {sequence_length}")
    if min_samples < 1:
        raise InvalidInputError("min_samples", f"must be at least 1, got {min_samples}")
    if not 0 < test_fraction < 1:
        raise InvalidInputError("test_fraction", f"must be in (0, 1), got {test_fraction}")
    roles = _read_roles(path)
    length = sequence_length
    train_parts, test_parts, natural, test_rows = _split_roles(roles, length, min_samples, test_fraction)
    if not natural:
        raise InvalidInputError(
            "dataset",
            f"no role in {str(path)!r} has {min_samples} training windows of "
            f"{sequence_length} characters; lower min_samples or sequence_length",
        )
    if not test_rows:
        raise InvalidInputError(
            "dataset",
            f"no role in {str(path)!r} leaves a test window of {sequence_length} characters; "
            "raise test_fraction or lower sequence_length",
        )
    train_x, train_y = _windows(np.concatenate(train_parts), length)
    all_test_x, all_test_y = _windows(np.concatenate(test_parts), length)
    keep = torch.from_numpy(np.concatenate(test_rows))
    return federate(
        name="shakespeare",
        task="next_char",
        train_x=train_x,
        train_y=train_y,
        test_x=all_test_x[keep],
        test_y=all_test_y[keep],
        num_classes=len(VOCAB),
        partition=partition,
        num_clients=num_clients,
        alpha=alpha,
        seed=seed,
        natural=natural,
        vocab=VOCAB,
        max_test_samples=max_test_samples,
        client_test_fraction=client_test_fraction,
    )


def _read_roles(path: str | Path) -> dict[str, str]:
    """Role -> everything it says in the plays file at ``path`` (``parse_roles``); a file
    that cannot be read or has no speeches is bad input naming it."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InvalidInputError("dataset", f"cannot read the plays file {str(path)!r}: {exc}") from exc
    roles = parse_roles(text)
    if not roles:
        raise InvalidInputError(
            "dataset",
            f"{str(path)!r} has no speeches: expected blocks separated by blank lines, each "
            "starting with a speaker line such as 'First Citizen:'",
        )
    return roles


def _split_roles(roles: dict[str, str], length: int, min_samples: int, test_fraction: float) -> tuple[
        list[np.ndarray], list[np.ndarray], list[tuple[str, np.ndarray]], list[np.ndarray]]:
    """Each role with at least ``min_samples`` training windows: its encoded training text
    and the last ``test_fraction`` of it as test text, its windows' row numbers in the
    concatenated training text (the natural clients) and its test windows' row numbers."""
    train_parts: list[np.ndarray] = []
    test_parts: list[np.ndarray] = []
    natural: list[tuple[str, np.ndarray]] = []
    test_rows: list[np.ndarray] = []
    train_offset = test_offset = 0
    for role, role_text in roles.items():
        codes = encode(role_text)
        test_chars = int(round(test_fraction * codes.size))
        train_codes, test_codes = codes[: codes.size - test_chars], codes[codes.size - test_chars :]
        train_windows = train_codes.size - length
        if train_windows < min_samples:
            continue
        natural.append((role, np.arange(train_offset, train_offset + train_windows)))
        train_parts.append(train_codes)
        train_offset += train_codes.size
        test_windows = test_codes.size - length
        if test_windows > 0:
            test_rows.append(np.arange(test_offset, test_offset + test_windows))
        test_parts.append(test_codes)
        test_offset += test_codes.size
    return train_parts, test_parts, natural, test_rows


def _windows(codes: np.ndarray, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Row ``s`` is ``codes[s:s+length]`` (a view), its label ``codes[s+length]``."""
    stream = torch.from_numpy(codes.copy())
    return stream[:-1].unfold(0, length, 1), stream[length:].to(torch.int64)
