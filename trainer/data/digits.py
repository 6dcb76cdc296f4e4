"""scikit-learn's bundled 8x8 digits (``docs/trainer.md``, "digits").

1797 real handwritten digits shipped inside scikit-learn (no download). A seeded
``test_fraction`` is held out; the rest is split across clients (``iid`` or
``dirichlet``; digits have no natural clients). Pixels are standardised by the training
set's mean and std and shaped ``[1, 8, 8]``.
"""

from __future__ import annotations

import numpy as np
import torch

from trainer.data.dataset import FederatedDataset
from trainer.data.federate import federate, split_test, standardize_images


def load_digits_dataset(
    *,
    num_clients: int,
    partition: str,
    alpha: float,
    seed: int,
    test_fraction: float = 0.2,
    max_test_samples: int | None = None,
) -> FederatedDataset:
    """The digits split into ``num_clients`` clients."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = np.asarray(bunch.images, dtype=np.float32)[:, None, :, :]
    labels = np.asarray(bunch.target, dtype=np.int64)
    train_rows, test_rows = split_test(labels.size, test_fraction, seed)
    train_x, test_x = standardize_images(images[train_rows], images[test_rows])
    return federate(
        name="digits",
        task="classification",
        train_x=train_x,
        train_y=torch.from_numpy(labels[train_rows]),
        test_x=test_x,
        test_y=torch.from_numpy(labels[test_rows]),
        num_classes=10,
        partition=partition,
        num_clients=num_clients,
        alpha=alpha,
        seed=seed,
        max_test_samples=max_test_samples,
    )
