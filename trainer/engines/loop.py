"""The reference engine: one client at a time (``docs/trainer.md``, "Local training engines").

A private copy of the model is loaded with the client's start point (the global
parameters or its ``start`` row) and trained with ``torch.optim.SGD`` on the client's
minibatches; nothing is shared between clients. A proximal term ``(mu/2)||w - a||^2`` is
added to the gradient before the optimiser step, where SGD's weight decay is added too.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn

from trainer.data.dataset import FederatedDataset
from trainer.engines.batches import gather_batches
from trainer.engines.config import LocalTrainingConfig
from trainer.engines.losses import mean_loss
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
    start: torch.Tensor | None = None,
    anchor: torch.Tensor | None = None,
    prox: torch.Tensor | None = None,
) -> torch.Tensor:
    """Updates ``[n, d]`` (``w_i - s_i``), computed client by client (arguments as
    ``train_batched``'s)."""
    device, dtype = global_flat.device, global_flat.dtype
    local = copy.deepcopy(model).to(device=device, dtype=dtype)
    parameters = list(local.parameters())
    updates = torch.empty(len(clients), global_flat.numel(), device=device, dtype=dtype)
    for position, client in enumerate(clients):
        x, y = gather_batches(
            dataset, [client], config, seed=seed, round_index=round_index, device=device, dtype=dtype
        )
        origin = global_flat if start is None else start[position].to(device=device, dtype=dtype)
        with torch.no_grad():
            for parameter, value in zip(parameters, unflatten_params(origin, local).values()):
                parameter.copy_(value)
        anchors: list[torch.Tensor] = []
        rate = 0.0 if prox is None else float(prox[position])
        if rate > 0:
            assert anchor is not None
            row = (anchor if anchor.dim() == 1 else anchor[position]).to(device=device, dtype=dtype)
            anchors = list(unflatten_params(row, local).values())
        optimizer = torch.optim.SGD(
            parameters, lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay
        )
        for step in range(config.local_steps):
            optimizer.zero_grad(set_to_none=True)
            loss = mean_loss(dataset.task, local(x[0, step]), y[0, step])
            loss.backward()
            if anchors:
                with torch.no_grad():
                    for parameter, target in zip(parameters, anchors):
                        assert parameter.grad is not None
                        parameter.grad.add_(rate * (parameter - target))
            optimizer.step()
        updates[position] = flatten_params(local) - origin
    return updates
