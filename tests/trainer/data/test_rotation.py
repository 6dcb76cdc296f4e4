"""Rotated digits (docs/trainer.md §Rotated digits): each client's rows rotated by 90 degrees
with probability p, training and local test rows alike; the silo split shares the rotation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from accounting.errors import InvalidInputError
from trainer.data import load_dataset
from trainer.data.rotation import rotate_clients, rotate_images, rotated_clients
from trainer.data.silos import load_silo_data


def digits(p: float, clients: int = 40, seed: int = 0):
    return load_dataset("digits", num_clients=clients, seed=seed, client_test_fraction=0.2, rotation_probability=p)


def test_rotated_clients_have_every_row_turned_90_degrees_and_the_others_none() -> None:
    plain, rotated = digits(0.0), digits(0.5)
    turned = rotated_clients(rotated)
    assert 0 < len(turned) < rotated.num_clients
    assert rotated_clients(plain) == []
    for client in range(rotated.num_clients):
        assert plain.client_test_indices is not None and rotated.client_test_indices is not None
        for rows in (plain.client_indices[client], plain.client_test_indices[client]):
            before, after = plain.train_x[rows], rotated.train_x[rows]
            if client in turned:
                # counter-clockwise: column j of the original is row (W - 1 - j) of the turned image
                assert torch.equal(after, torch.rot90(before, 1, dims=(-2, -1)))
                assert not torch.equal(after, before)
            else:
                assert torch.equal(after, before)
    # labels, the split and the server's test set are unchanged
    assert torch.equal(plain.train_y, rotated.train_y)
    assert all(torch.equal(a, b) for a, b in zip(plain.client_indices, rotated.client_indices))
    assert torch.equal(plain.test_x, rotated.test_x)


def test_each_client_is_rotated_with_probability_p() -> None:
    base = digits(0.0, clients=400)
    for p in (0.5, 0.2):
        counts = [len(rotated_clients(rotate_clients(base, p, seed))) for seed in range(5)]
        total = sum(counts)
        assert stats.binomtest(total, 5 * 400, p).pvalue > 1e-3, (p, counts)
    # a wrong p is caught by the same test (the check can fail)
    wrong = sum(len(rotated_clients(rotate_clients(base, 0.3, seed))) for seed in range(5))
    assert stats.binomtest(wrong, 5 * 400, 0.5).pvalue < 1e-3
    # seeded: the same seed rotates the same clients
    assert rotated_clients(rotate_clients(base, 0.5, 7)) == rotated_clients(rotate_clients(base, 0.5, 7))


def test_the_silo_split_uses_the_same_rotation() -> None:
    images = np.arange(2 * 3 * 3, dtype=np.float32).reshape(2, 1, 3, 3)
    once = rotate_images(images, 1)
    assert np.array_equal(once[0, 0], np.array([[2, 5, 8], [1, 4, 7], [0, 3, 6]], dtype=np.float32))
    assert np.array_equal(rotate_images(images, 4), images)
    data = load_silo_data("rotated_digits", [20, 20], seed=0, test_samples=5, groups=2)
    assert data.train.train_x.shape[1:] == (1, 8, 8)


def test_bad_probability_and_non_images_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="rotation_probability"):
        digits(1.5)
    vectors = load_dataset("metric_synthetic", num_clients=4, partition="natural", seed=0)
    with pytest.raises(InvalidInputError, match="not images"):
        rotate_clients(vectors, 0.5, 0)
