"""The reference engine: one client at a time (``docs/trainer.md``, "Local training engines").

A private copy of the model is loaded with the global parameters for each client and
trained with ``torch.optim.SGD`` on the client's minibatches; nothing is shared between
clients except the starting point.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from trainer.data.dataset import FederatedDataset
from trainer.engines.batches import gather_batches
from trainer.engines.config import LocalTrainingConfig
from trainer.engines.params import flatten_params, unflatten_params


def train_loop(
    model: nn.Module,
    global_flat: torch.Tensor,
    dataset: FederatedDataset,
    clients: Sequence[int],
    config: LocalTrainingConfig,
    *,
    seed: int,
    round_index: int,
) -> torch.Tensor:
    """Updates ``[n, d]`` (``w_i - w_global``), computed client by client."""
    device, dtype = global_flat.device, global_flat.dtype
    local = copy.deepcopy(model).to(device=device, dtype=dtype)
    parameters = list(local.parameters())
    updates = torch.empty(len(clients), global_flat.numel(), device=device, dtype=dtype)
    for position, client in enumerate(clients):
        x, y = gather_batches(
            dataset, [client], config, seed=seed, round_index=round_index, device=device, dtype=dtype
        )
        with torch.no_grad():
            for parameter, start in zip(parameters, unflatten_params(global_flat, local).values()):
                parameter.copy_(start)
        optimizer = torch.optim.SGD(
            parameters, lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay
        )
        for step in range(config.local_steps):
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(local(x[0, step]), y[0, step])
            loss.backward()
            optimizer.step()
        updates[position] = flatten_params(local) - global_flat
    return updates
