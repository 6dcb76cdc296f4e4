"""SVHN cropped digits, ``.mat`` format (``docs/trainer.md``, "File formats").

``train_32x32.mat`` / ``test_32x32.mat`` (MATLAB files read with ``scipy.io.loadmat``)
hold ``X`` as ``[32, 32, 3, N]`` uint8 and ``y`` as ``[N, 1]`` in 1..10, where 10 stands
for the digit 0. The path is a directory with those files or a single ``.mat`` file
(then a seeded test split is held out).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from accounting.errors import InvalidInputError
from trainer.data.dataset import FederatedDataset
from trainer.data.federate import federate_images


def read_mat(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(images [N, 3, 32, 32] uint8, labels [N] int64 in 0..9)`` of one SVHN file."""
    from scipy.io import loadmat

    try:
        contents = loadmat(str(path))
    except Exception as exc:  # scipy raises several types for a file that is not .mat
        raise InvalidInputError("dataset", f"{str(path)!r} is not a readable .mat file: {exc}") from exc
    if "X" not in contents or "y" not in contents:
        raise InvalidInputError("dataset", f"{str(path)!r} lacks the SVHN variables X and y")
    images = np.asarray(contents["X"])
    labels = np.asarray(contents["y"]).reshape(-1).astype(np.int64)
    if images.ndim != 4 or images.shape[2] != 3 or images.shape[3] != labels.size:
        raise InvalidInputError(
            "dataset",
            f"{str(path)!r}: X must be [H, W, 3, N] with one y per image, got "
            f"{images.shape} and {labels.size} labels",
        )
    if labels.size and (labels.min() < 1 or labels.max() > 10):
        raise InvalidInputError("dataset", f"{str(path)!r}: y must lie in 1..10")
    labels = np.where(labels == 10, 0, labels)
    return np.ascontiguousarray(images.transpose(3, 2, 0, 1)), labels


def load_svhn(
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
    """SVHN from a directory (``train_32x32.mat`` [+ ``test_32x32.mat``]) or one ``.mat``."""
    path = Path(path)
    train_file = path / "train_32x32.mat" if path.is_dir() else path
    if not train_file.is_file():
        raise InvalidInputError("dataset", f"{str(path)!r} has no train_32x32.mat")
    train_images, train_labels = read_mat(train_file)
    test_file = path / "test_32x32.mat" if path.is_dir() else None
    test = read_mat(test_file) if test_file is not None and test_file.is_file() else None
    return federate_images(
        "svhn", (train_images, train_labels), test, num_classes=10,
        num_clients=num_clients, partition=partition, alpha=alpha, seed=seed,
        test_fraction=test_fraction, max_test_samples=max_test_samples,
        client_test_fraction=client_test_fraction,
    )
