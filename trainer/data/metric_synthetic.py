"""The metric-privacy paper's synthetic regression (docs/metric-privacy.md §6).

Two populations of users with ``y = x^T theta_i* + u``, ``u ~ U[0, 1]``,
``theta_1* = [5, 6]``, ``theta_2* = [4, -4.5]``; ``x ~ N(0, I_2)`` ([recon]: the paper
does not say how x is drawn). User ``c`` belongs to population ``c mod 2``; each has
``samples_per_client`` training rows and ``test_samples_per_client`` held-out rows, its
local test split (``client_test_indices``); the server's test set is all of them, in
user order.
"""

from __future__ import annotations

import numpy as np
import torch

from accounting.errors import InvalidInputError
from trainer.data.dataset import FederatedDataset

TRUE_PARAMETERS = ((5.0, 6.0), (4.0, -4.5))


def population_of(client: int) -> int:
    """Which true parameter user ``client`` follows (alternating, so any prefix is balanced)."""
    return client % len(TRUE_PARAMETERS)


def load_metric_synthetic(
    *,
    num_clients: int = 100,
    partition: str = "natural",
    alpha: float = 0.5,
    seed: int = 0,
    samples_per_client: int = 10,
    test_samples_per_client: int = 10,
) -> FederatedDataset:
    """``num_clients`` users of the two populations (their own, ``natural``, partition)."""
    del alpha  # the users are the data's own clients
    if partition not in ("natural", "iid"):
        raise InvalidInputError("partition", f"metric_synthetic has its own users (natural), got {partition!r}")
    if num_clients < 1 or samples_per_client < 1 or test_samples_per_client < 1:
        raise InvalidInputError("num_clients", "clients and samples per client must be at least 1")
    rng = np.random.default_rng([seed, 4004])
    truths = np.asarray(TRUE_PARAMETERS)
    per_client = samples_per_client + test_samples_per_client
    x = rng.standard_normal((num_clients, per_client, 2))
    theta = truths[[population_of(c) for c in range(num_clients)]]  # [N, 2]
    y = np.einsum("cpd,cd->cp", x, theta) + rng.uniform(0.0, 1.0, (num_clients, per_client))
    # every user's held-out rows are its local test split (rows of train_x after all the
    # training rows) and, together, the server's test set
    train_x = np.concatenate([x[:, :samples_per_client].reshape(-1, 2), x[:, samples_per_client:].reshape(-1, 2)])
    train_y = np.concatenate([y[:, :samples_per_client].reshape(-1), y[:, samples_per_client:].reshape(-1)])
    test_x = x[:, samples_per_client:].reshape(-1, 2)
    test_y = y[:, samples_per_client:].reshape(-1)
    held_out = num_clients * samples_per_client
    indices = tuple(torch.arange(c * samples_per_client, (c + 1) * samples_per_client) for c in range(num_clients))
    tests = tuple(
        torch.arange(held_out + c * test_samples_per_client, held_out + (c + 1) * test_samples_per_client)
        for c in range(num_clients)
    )
    return FederatedDataset(
        name="metric_synthetic",
        task="regression",
        train_x=torch.from_numpy(train_x.astype(np.float32)),
        train_y=torch.from_numpy(train_y.astype(np.float32)),
        client_indices=indices,
        client_ids=tuple(f"user-{c:04d}-pop{population_of(c)}" for c in range(num_clients)),
        test_x=torch.from_numpy(test_x.astype(np.float32)),
        test_y=torch.from_numpy(test_y.astype(np.float32)),
        num_classes=1,
        input_shape=(2,),
        client_test_indices=tests,
    )
