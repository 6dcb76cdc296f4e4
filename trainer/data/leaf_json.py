"""LEAF JSON (``docs/trainer.md``, "File formats").

A LEAF file is ``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [...],
"y": [...]}}}``. Features ``x`` are numeric vectors/arrays (synthetic, FEMNIST) with
integer labels, or strings of equal length with one-character labels (Shakespeare:
next-character prediction over the fixed printable vocabulary of ``shakespeare.py``).
The path is a LEAF data directory with ``train/`` and ``test/`` JSON files, a directory
of JSON files, or one JSON file; without a test part a seeded test split is held out.
Users are the natural clients. With ``partition="natural"`` each user's own test records
are also its local test data (``FederatedDataset.client_test_indices``): they are
appended to the client rows outside every user's training rows, and the pooled test
files stay the server's test set.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from accounting.errors import InvalidInputError
from trainer.data.dataset import FederatedDataset
from trainer.data.federate import federate, split_test
from trainer.data.shakespeare import VOCAB, encode


def read_leaf(path: Path) -> list[tuple[str, list[Any], list[Any]]]:
    """``[(user, x, y), ...]`` from one LEAF JSON file, users in file order."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInputError("dataset", f"{str(path)!r} is not readable JSON: {exc}") from exc
    if not isinstance(document, dict) or not {"users", "user_data"} <= document.keys():
        raise InvalidInputError(
            "dataset", f"{str(path)!r} is not LEAF JSON (needs 'users' and 'user_data')"
        )
    users, user_data = document["users"], document["user_data"]
    counts = document.get("num_samples")
    records = []
    for position, user in enumerate(users):
        data = user_data.get(user) if isinstance(user_data, dict) else None
        if not isinstance(data, dict) or not isinstance(data.get("x"), list) or not isinstance(
            data.get("y"), list
        ):
            raise InvalidInputError("dataset", f"{str(path)!r}: user {user!r} lacks x/y lists")
        if len(data["x"]) != len(data["y"]):
            raise InvalidInputError(
                "dataset", f"{str(path)!r}: user {user!r} has {len(data['x'])} x but {len(data['y'])} y"
            )
        if isinstance(counts, list) and position < len(counts) and counts[position] != len(data["y"]):
            raise InvalidInputError(
                "dataset",
                f"{str(path)!r}: num_samples says {counts[position]} for {user!r}, "
                f"user_data holds {len(data['y'])}",
            )
        records.append((str(user), data["x"], data["y"]))
    return records


def leaf_parts(path: Path) -> tuple[list[Path], list[Path]]:
    """``(train_files, test_files)`` for a LEAF directory, directory of JSON or JSON file."""
    if path.is_file():
        return [path], []
    train_dir, test_dir = path / "train", path / "test"
    if train_dir.is_dir():
        test = sorted(test_dir.glob("*.json")) if test_dir.is_dir() else []
        return sorted(train_dir.glob("*.json")), test
    return sorted(path.glob("*.json")), []


def load_leaf(
    path: str | Path,
    *,
    num_clients: int,
    partition: str,
    alpha: float,
    seed: int,
    test_fraction: float = 0.2,
    max_test_samples: int | None = None,
    client_test_fraction: float = 0.0,
) -> FederatedDataset:
    """LEAF users as natural clients; see the module docstring for the accepted layouts."""
    path = Path(path)
    train_files, test_files = leaf_parts(path)
    if not train_files:
        raise InvalidInputError("dataset", f"{str(path)!r} holds no LEAF JSON files")
    train_records = [record for file in train_files for record in read_leaf(file)]
    test_records = [record for file in test_files for record in read_leaf(file)]
    samples = [x for _, xs, _ in train_records + test_records for x in xs]
    if not samples:
        raise InvalidInputError("dataset", f"{str(path)!r} holds no samples")
    next_char = isinstance(samples[0], str)
    convert = _characters if next_char else _numbers

    def pool(records: list[tuple[str, list[Any], list[Any]]]) -> tuple[np.ndarray, np.ndarray]:
        xs = [x for _, user_x, _ in records for x in user_x]
        ys = [y for _, _, user_y in records for y in user_y]
        return convert(xs, ys, path)

    train_x, train_y = pool(train_records)
    natural, start = [], 0
    for user, xs, _ in train_records:
        natural.append((user, np.arange(start, start + len(xs))))
        start += len(xs)
    natural_tests = None
    if test_records:
        test_x, test_y = pool(test_records)
        _check_shapes(train_x, test_x, path)
        if partition == "natural":
            # every user's own test records, as client rows after all training rows
            natural_tests, start = [], train_y.size
            for user, xs, _ in test_records:
                natural_tests.append((user, np.arange(start, start + len(xs))))
                start += len(xs)
            train_x = np.concatenate([train_x, test_x])
            train_y = np.concatenate([train_y, test_y])
    else:
        train_rows, test_rows = split_test(train_y.size, test_fraction, seed)
        test_x, test_y = train_x[test_rows], train_y[test_rows]
        position = np.full(train_y.size, -1)
        position[train_rows] = np.arange(train_rows.size)
        natural = [(user, position[rows][position[rows] >= 0]) for user, rows in natural]
        train_x, train_y = train_x[train_rows], train_y[train_rows]
    if next_char:
        num_classes = len(VOCAB)
    else:
        num_classes = int(max(train_y.max(), test_y.max())) + 1
    return federate(
        name=f"leaf:{path.name}",
        task="next_char" if next_char else "classification",
        train_x=torch.from_numpy(train_x),
        train_y=torch.from_numpy(train_y),
        test_x=torch.from_numpy(test_x),
        test_y=torch.from_numpy(test_y),
        num_classes=num_classes,
        partition=partition,
        num_clients=num_clients,
        alpha=alpha,
        seed=seed,
        natural=natural,
        vocab=VOCAB if next_char else None,
        max_test_samples=max_test_samples,
        client_test_fraction=client_test_fraction,
        natural_tests=natural_tests,
    )


def _check_shapes(train_x: np.ndarray, test_x: np.ndarray, path: Path) -> None:
    if train_x.shape[1:] != test_x.shape[1:]:
        raise InvalidInputError(
            "dataset",
            f"{str(path)!r}: train samples have shape {train_x.shape[1:]}, test samples "
            f"{test_x.shape[1:]}",
        )


def _numbers(xs: list[Any], ys: list[Any], path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        x = np.asarray(xs, dtype=np.float32)
        y = np.asarray(ys, dtype=np.int64)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(
            "dataset", f"{str(path)!r}: x must be equal-shaped numbers and y integers ({exc})"
        ) from exc
    if x.ndim < 2 or y.ndim != 1 or (y.size and y.min() < 0):
        raise InvalidInputError(
            "dataset", f"{str(path)!r}: x must be vectors and y non-negative integer labels"
        )
    return x, y


def _characters(xs: list[Any], ys: list[Any], path: Path) -> tuple[np.ndarray, np.ndarray]:
    if not all(isinstance(x, str) for x in xs) or not all(
        isinstance(y, str) and len(y) == 1 for y in ys
    ):
        raise InvalidInputError(
            "dataset", f"{str(path)!r}: string samples need string x and one-character y"
        )
    lengths = {len(x) for x in xs}
    if len(lengths) != 1:
        raise InvalidInputError("dataset", f"{str(path)!r}: x strings differ in length {sorted(lengths)}")
    x = np.stack([encode(s) for s in xs]) if xs else np.zeros((0, 0), np.uint8)
    y = encode("".join(ys)).astype(np.int64)
    return x, y
