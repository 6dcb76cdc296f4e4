"""LEAF's synthetic classification (``docs/trainer.md`` §Data, "leaf_synthetic").

Caldas et al., "LEAF: A Benchmark for Federated Settings", as in LEAF's generator
(``data/synthetic``). Unlike FedProx's synthetic(alpha, beta) (``trainer/data/synthetic.py``),
where every device draws its own labelling model, LEAF's devices share a model up to a
small perturbation, so one global model can learn them all:

    Q ~ N(0, 1)^{(D+1) x C x M},  cluster means mu_m ~ N(l_m, 1)^M with l_m ~ N(0, 1)
    device k: cluster m_k ~ p,  s_k ~ N(mu_{m_k}, 0.1^2)^M,  w_k = Q s_k  ((D+1) x C)
              B_k ~ N(0, 1),  v_k ~ N(B_k, 1)^D,  x ~ N(v_k, Sigma),  Sigma_jj = j^-1.2
              y = argmax([1, x] w_k + e),  e ~ N(0, 0.1^2)^C per sample

with M clusters of equal probability (LEAF's default is one), and device sizes
``floor(LogNormal(3, 2)) + 5`` capped at ``max_samples_per_client`` (LEAF: 5 and 1000).
The last ``test_fraction`` of every device's samples forms the shared test set.
"""

from __future__ import annotations

import numpy as np

from accounting.errors import InvalidInputError
from trainer.data.dataset import FederatedDataset
from trainer.data.synthetic import federate_devices

MODEL_SPREAD = 0.1
LOGIT_NOISE = 0.1
MIN_SAMPLES = 5


def load_leaf_synthetic(
    *,
    num_clients: int,
    partition: str,
    alpha: float,
    seed: int,
    num_classes: int = 5,
    num_features: int = 60,
    clusters: int = 1,
    test_fraction: float = 0.1,
    max_samples_per_client: int = 1000,
    max_test_samples: int | None = None,
    client_test_fraction: float = 0.0,
) -> FederatedDataset:
    """LEAF synthetic with ``num_clients`` devices, one natural client each.

    Defaults follow LEAF's README (``-num-classes 5 -num-dim 60``, one cluster);
    ``partition='natural'`` keeps the devices, ``iid``/``dirichlet`` pool and re-split.
    """
    for field, value, least in (
        ("num_clients", num_clients, 1),
        ("num_classes", num_classes, 2),
        ("num_features", num_features, 1),
        ("clusters", clusters, 1),
        ("max_samples_per_client", max_samples_per_client, MIN_SAMPLES),
    ):
        if value < least:
            raise InvalidInputError(field, f"must be at least {least}, got {value}")
    if not 0 < test_fraction < 1:
        raise InvalidInputError("test_fraction", f"must be in (0, 1), got {test_fraction}")
    rng = np.random.default_rng([seed, 0x1EAF])
    q = rng.normal(0.0, 1.0, (num_features + 1, num_classes, clusters))
    means = [rng.normal(rng.normal(0.0, 1.0), 1.0, clusters) for _ in range(clusters)]
    std_x = np.power(np.arange(1, num_features + 1, dtype=np.float64), -1.2 / 2)
    sizes = np.minimum(
        rng.lognormal(3.0, 2.0, num_clients).astype(np.int64) + MIN_SAMPLES, max_samples_per_client
    )
    devices: list[tuple[np.ndarray, np.ndarray]] = []
    for k in range(num_clients):
        cluster = int(rng.integers(clusters))
        side_info = rng.normal(means[cluster], MODEL_SPREAD)
        weight = q @ side_info  # (D + 1) x C
        mean_x = rng.normal(rng.normal(0.0, 1.0), 1.0, num_features)
        # Sigma is diagonal, so x = v_k + sqrt(diag) * z.
        x = mean_x + std_x * rng.standard_normal((int(sizes[k]), num_features))
        logits = x @ weight[1:] + weight[0] + rng.normal(0.0, LOGIT_NOISE, (len(x), num_classes))
        devices.append((x, np.argmax(logits, axis=1)))
    return federate_devices(
        "leaf_synthetic", devices, test_fraction, num_classes, partition=partition, num_clients=num_clients,
        alpha=alpha, seed=seed, max_test_samples=max_test_samples, client_test_fraction=client_test_fraction,
    )
