"""FedProx's synthetic(alpha, beta) classification (``docs/trainer.md``, "synthetic";
LEAF's own generator is ``trainer/data/leaf_synthetic.py``).

Li et al., "Federated Optimization in Heterogeneous Networks" (FedProx), section 5.1,
following its reference generator (``alpha`` and ``beta`` are standard deviations there):
for device ``k``

    u_k ~ N(0, alpha^2),  W_k ~ N(u_k, 1)^{60 x 10},  b_k ~ N(u_k, 1)^{10}
    B_k ~ N(0, beta^2),   v_k ~ N(B_k, 1)^{60},       x ~ N(v_k, Sigma), Sigma_jj = j^-1.2
    y = argmax(softmax(W_k^T x + b_k))

and device sizes ``floor(LogNormal(4, 2)) + 50`` (a heavy tail), capped at
``max_samples_per_client``. ``alpha`` controls how much the devices' models differ,
``beta`` how much their inputs differ. The last ``test_fraction`` of every device's
samples forms the shared test set.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from accounting.errors import InvalidInputError
from trainer.data.dataset import FederatedDataset
from trainer.data.federate import federate

NUM_FEATURES = 60
NUM_CLASSES = 10


def load_synthetic(
    *,
    num_clients: int,
    partition: str,
    alpha: float,
    seed: int,
    synthetic_alpha: float = 1.0,
    synthetic_beta: float = 1.0,
    test_fraction: float = 0.1,
    max_samples_per_client: int = 2000,
    max_test_samples: int | None = None,
    client_test_fraction: float = 0.0,
) -> FederatedDataset:
    """synthetic(``synthetic_alpha``, ``synthetic_beta``) with one natural client per device.

    The data always has ``num_clients`` devices; ``partition='natural'`` keeps them,
    ``iid``/``dirichlet`` pool and re-split their samples.
    """
    for field, value in (("synthetic_alpha", synthetic_alpha), ("synthetic_beta", synthetic_beta)):
        if not np.isfinite(value) or value < 0:
            raise InvalidInputError(field, f"must be a non-negative number, got {value}")
    if num_clients < 1:
        raise InvalidInputError("num_clients", f"must be at least 1, got {num_clients}")
    if not 0 < test_fraction < 1:
        raise InvalidInputError("test_fraction", f"must be in (0, 1), got {test_fraction}")
    if max_samples_per_client < 2:
        raise InvalidInputError(
            "max_samples_per_client", f"must be at least 2, got {max_samples_per_client}"
        )
    rng = np.random.default_rng([seed, 0x5A7])
    sizes = np.minimum(
        rng.lognormal(4.0, 2.0, num_clients).astype(np.int64) + 50, max_samples_per_client
    )
    mean_w = rng.normal(0.0, synthetic_alpha, num_clients)
    offset_b = rng.normal(0.0, synthetic_beta, num_clients)
    std_x = np.power(np.arange(1, NUM_FEATURES + 1, dtype=np.float64), -1.2 / 2)
    devices: list[tuple[np.ndarray, np.ndarray]] = []
    for k in range(num_clients):
        mean_x = rng.normal(offset_b[k], 1.0, NUM_FEATURES)
        weight = rng.normal(mean_w[k], 1.0, (NUM_FEATURES, NUM_CLASSES))
        bias = rng.normal(mean_w[k], 1.0, NUM_CLASSES)
        # Sigma is diagonal, so x = v_k + sqrt(diag) * z.
        x = mean_x + std_x * rng.standard_normal((int(sizes[k]), NUM_FEATURES))
        devices.append((x, np.argmax(x @ weight + bias, axis=1)))
    return federate_devices(
        "synthetic", devices, test_fraction, NUM_CLASSES, partition=partition, num_clients=num_clients,
        alpha=alpha, seed=seed, max_test_samples=max_test_samples, client_test_fraction=client_test_fraction,
    )


def federate_devices(
    name: str,
    devices: list[tuple[np.ndarray, np.ndarray]],
    test_fraction: float,
    num_classes: int,
    **options: Any,
) -> FederatedDataset:
    """A generated dataset with one natural client per device: the last ``test_fraction``
    of every device's samples (at least one) goes to the shared test set, the rest is the
    device's training data (``device-<k>``); ``options`` go to ``federate``."""
    train_x, train_y, test_x, test_y = [], [], [], []
    natural: list[tuple[str, np.ndarray]] = []
    start = 0
    for k, (x, y) in enumerate(devices):
        cut = len(x) - max(1, int(round(test_fraction * len(x))))
        train_x.append(x[:cut])
        train_y.append(y[:cut])
        test_x.append(x[cut:])
        test_y.append(y[cut:])
        natural.append((f"device-{k:05d}", np.arange(start, start + cut)))
        start += cut
    return federate(
        name=name,
        task="classification",
        train_x=torch.from_numpy(np.concatenate(train_x).astype(np.float32)),
        train_y=torch.from_numpy(np.concatenate(train_y).astype(np.int64)),
        test_x=torch.from_numpy(np.concatenate(test_x).astype(np.float32)),
        test_y=torch.from_numpy(np.concatenate(test_y).astype(np.int64)),
        num_classes=num_classes,
        natural=natural,
        **options,
    )
