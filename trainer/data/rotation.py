"""Rotated images: the rotation both rotated-digits splits use (docs/trainer.md §Rotated digits).

``rotate_images`` turns images ``[..., H, W]`` by multiples of 90 degrees (the silo
split ``trainer.data.silos.rotated_digits`` rotates each silo by its group's angle);
``rotate_clients`` is the metric-privacy paper's FEMNIST split on any image data: each
client, independently with probability ``p``, has all of its rows (training and local
test) rotated by 90 degrees, so the clients fall into two populations that one model
fits worse than two.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from accounting.errors import InvalidInputError
from trainer.data.dataset import FederatedDataset

ROTATED_SUFFIX = "-rot90"


def rotate_images(images: np.ndarray, quarter_turns: int) -> np.ndarray:
    """``images [..., H, W]`` rotated counter-clockwise by ``90 * quarter_turns`` degrees (a copy)."""
    return np.rot90(images, k=quarter_turns, axes=(-2, -1)).copy()


def rotate_clients(dataset: FederatedDataset, probability: float, seed: int) -> FederatedDataset:
    """``dataset`` with each client's rows rotated by 90 degrees with probability
    ``probability`` (Bernoulli per client from ``seed``); a rotated client's id ends in
    ``-rot90``. The server's test set is left as it is. Each row belongs to one client
    (training or local test rows), so no row is rotated twice."""
    if not 0 <= probability <= 1:
        raise InvalidInputError("rotation_probability", f"must be in [0, 1], got {probability}")
    if probability == 0:
        return dataset
    if dataset.train_x.ndim < 3:
        raise InvalidInputError("rotation_probability", f"{dataset.name} rows are not images")
    rotated = np.random.default_rng([seed, 0x5207]).random(dataset.num_clients) < probability
    images = dataset.train_x.numpy().copy()
    ids = list(dataset.client_ids)
    tests = dataset.client_test_indices or tuple(torch.zeros(0, dtype=torch.long) for _ in ids)
    for client in np.flatnonzero(rotated).tolist():
        rows = torch.cat([dataset.client_indices[client], tests[client]]).numpy()
        images[rows] = rotate_images(images[rows], 1)
        ids[client] += ROTATED_SUFFIX
    return replace(dataset, train_x=torch.from_numpy(images), client_ids=tuple(ids))


def rotated_clients(dataset: FederatedDataset) -> list[int]:
    """The clients ``rotate_clients`` rotated (by their id)."""
    return [i for i, name in enumerate(dataset.client_ids) if name.endswith(ROTATED_SUFFIX)]
