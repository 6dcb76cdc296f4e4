"""CIFAR-10 "python version" batches (``docs/trainer.md``, "File formats").

Each batch file is a pickled dict with ``b'data'`` (uint8 ``[N, 3072]``, the red, green
and blue 32x32 planes of each image in turn) and ``b'labels'`` (N ints in 0..9). A
directory holds ``data_batch_1`` .. ``data_batch_5`` and ``test_batch``. The pickles are
read with an unpickler that only rebuilds NumPy arrays, so a crafted file cannot run code.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np

from accounting.errors import InvalidInputError
from trainer.data.dataset import FederatedDataset
from trainer.data.federate import federate_images

_ALLOWED = {
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
}


def read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(images [N, 3, 32, 32] uint8, labels [N] int64)`` of one batch file."""
    try:
        with path.open("rb") as handle:
            batch = _ArraysOnly(handle, encoding="bytes").load()
    except Exception as exc:  # any unreadable pickle is the user's file, not our bug
        raise InvalidInputError(
            "dataset", f"{str(path)!r} is not a CIFAR-10 python batch: {exc}"
        ) from exc
    if not isinstance(batch, dict):
        raise InvalidInputError("dataset", f"{str(path)!r} does not hold a dict")
    data = batch.get(b"data", batch.get("data"))
    labels = batch.get(b"labels", batch.get("labels"))
    if data is None or labels is None:
        raise InvalidInputError("dataset", f"{str(path)!r} lacks b'data' or b'labels'")
    data = np.asarray(data)
    labels = np.asarray(labels, dtype=np.int64)
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or data.shape[0] != labels.shape[0]:
        raise InvalidInputError(
            "dataset",
            f"{str(path)!r}: b'data' must be [N, 3072] with one label per row, got "
            f"{data.shape} and {labels.shape[0]} labels",
        )
    return data.astype(np.uint8).reshape(-1, 3, 32, 32), labels


def load_cifar10(
    directory: str | Path,
    *,
    num_clients: int,
    partition: str,
    alpha: float,
    seed: int,
    test_fraction: float = 0.2,
    max_test_samples: int | None = None,
    client_test_fraction: float = 0.0,
) -> FederatedDataset:
    """The batches in ``directory``; without ``test_batch`` a seeded test split."""
    directory = Path(directory)
    train_files = sorted(directory.glob("data_batch_*"))
    if not train_files:
        raise InvalidInputError("dataset", f"{str(directory)!r} has no data_batch_* files")
    parts = [read_batch(path) for path in train_files]
    train_images = np.concatenate([images for images, _ in parts])
    train_labels = np.concatenate([labels for _, labels in parts])
    test_file = directory / "test_batch"
    test = read_batch(test_file) if test_file.is_file() else None
    return federate_images(
        "cifar10", (train_images, train_labels), test, num_classes=10,
        num_clients=num_clients, partition=partition, alpha=alpha, seed=seed,
        test_fraction=test_fraction, max_test_samples=max_test_samples,
        client_test_fraction=client_test_fraction,
    )


class _ArraysOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
