"""scikit-learn's bundled 8x8 digits (``docs/trainer.md``, "digits").

1797 real handwritten digits shipped inside scikit-learn (no download). A seeded
``test_fraction`` is held out; the rest is split across clients (``iid`` or
``dirichlet``; digits have no natural clients). Pixels are standardised by the training
set's mean and std and shaped ``[1, 8, 8]``. ``rotation_probability`` makes the
metric-privacy paper's rotated split (each client rotated by 90 degrees with that
probability).
"""

from __future__ import annotations

import numpy as np

from trainer.data.dataset import FederatedDataset
from trainer.data.federate import federate_images
from trainer.data.rotation import rotate_clients


def load_digits_dataset(
    *,
    num_clients: int,
    partition: str,
    alpha: float,
    seed: int,
    test_fraction: float = 0.2,
    max_test_samples: int | None = None,
    client_test_fraction: float = 0.0,
    rotation_probability: float = 0.0,
) -> FederatedDataset:
    """The digits split into ``num_clients`` clients; with ``rotation_probability`` p > 0,
    each client's rows rotated by 90 degrees with probability p
    (``trainer.data.rotation.rotate_clients``, docs/trainer.md §Rotated digits)."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = np.asarray(bunch.images, dtype=np.float32)[:, None, :, :]
    labels = np.asarray(bunch.target, dtype=np.int64)
    dataset = federate_images(
        "digits", (images, labels), None, num_classes=10,
        num_clients=num_clients, partition=partition, alpha=alpha, seed=seed,
        test_fraction=test_fraction, max_test_samples=max_test_samples,
        client_test_fraction=client_test_fraction,
    )
    return rotate_clients(dataset, rotation_probability, seed)
