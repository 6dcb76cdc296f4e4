"""Which samples each client uses at each local step (``docs/trainer.md``, "Minibatches").

Client ``c`` in round ``r`` of a run with ``seed`` reads a stream of its sample positions
made of independent uniformly random permutations of ``0..n_c-1`` one after another,
drawn from ``numpy.random.default_rng([seed, r, c])``; step ``s`` uses stream items
``s*B .. s*B+B-1``. With ``n_c >= B`` every batch has distinct samples (an epoch-style
pass); with ``n_c < B`` a batch holds every sample ``floor(B/n_c)`` or ``ceil(B/n_c)``
times, so every batch has exactly ``B`` rows and clients batch together. Both engines
read the same rows, which is why they give the same updates.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from accounting.errors import InvalidInputError
from trainer.data.dataset import FederatedDataset
from trainer.engines.config import LocalTrainingConfig


def client_rows(
    dataset: FederatedDataset,
    client: int,
    config: LocalTrainingConfig,
    *,
    seed: int,
    round_index: int,
) -> torch.Tensor:
    """Rows of ``dataset.train_x`` that client ``client`` reads, ``[local_steps, batch_size]``."""
    if seed < 0 or round_index < 0:
        raise InvalidInputError("seed", "seed and round_index must be non-negative integers")
    if not 0 <= client < dataset.num_clients:
        raise InvalidInputError(
            "client_indices", f"client {client} is not in 0..{dataset.num_clients - 1}"
        )
    indices = dataset.client_indices[client]
    size = int(indices.numel())
    if size == 0:
        raise InvalidInputError("client_indices", f"client {client} has no training samples")
    need = config.local_steps * config.batch_size
    rng = np.random.default_rng([seed, round_index, client])
    if size >= need:
        # The first ``need`` items of one uniform permutation.
        positions = rng.choice(size, need, replace=False)
    else:
        repeats = -(-need // size)
        positions = rng.permuted(np.tile(np.arange(size), (repeats, 1)), axis=1).ravel()[:need]
    return indices[torch.from_numpy(positions)].reshape(config.local_steps, config.batch_size)


def gather_batches(
    dataset: FederatedDataset,
    clients: Sequence[int],
    config: LocalTrainingConfig,
    *,
    seed: int,
    round_index: int,
    device: torch.device,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """All minibatches of ``clients``: ``x [n, steps, B, *input_shape]``, ``y [n, steps, B]``.

    Gathered on the host in one indexing operation and moved to ``device`` once; floating
    features are cast to ``dtype`` (the parameters' dtype).
    """
    rows = torch.stack(
        [client_rows(dataset, c, config, seed=seed, round_index=round_index) for c in clients]
    )
    flat_rows = rows.reshape(-1)
    x = dataset.train_x[flat_rows]
    if x.is_floating_point():
        x = x.to(dtype)
    x = x.reshape(*rows.shape, *dataset.input_shape).to(device)
    y = dataset.train_y[flat_rows].reshape(rows.shape).to(device)
    return x, y
