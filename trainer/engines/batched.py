"""All clients at once with ``torch.func`` (``docs/trainer.md``, "Local training engines").

The clients' parameters are one matrix ``W`` of shape ``[n, d]`` (row ``i`` is client
``i``'s flat parameters, all starting at ``w_global``). One local step for all clients is

    G = vmap(grad(loss))(unflatten(W), X_s, Y_s)            # per-client gradients [n, d]
    G = G + weight_decay * W;  B = momentum * B + G;  W = W - lr * B

which is exactly ``torch.optim.SGD`` applied to every row separately. ``vmap`` turns the
per-client forward and backward passes into batched kernels (grouped convolutions,
batched matrix products), so the Python cost of a step is paid once for all clients.
Clients are processed in chunks of ``max_batch_clients`` to bound memory.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.nn import functional as F

from trainer.data.dataset import FederatedDataset
from trainer.engines.batches import gather_batches
from trainer.engines.config import LocalTrainingConfig
from trainer.engines.params import flatten_params, param_shapes, unflatten_params


def per_client_gradients(model: nn.Module) -> Callable[..., dict[str, torch.Tensor]]:
    """``(params [n, ...], x [n, B, ...], y [n, B]) -> grads [n, ...]`` of the mean loss."""

    def loss(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(model, params, (x,)), y)

    return vmap(grad(loss))


def train_batched(
    model: nn.Module,
    global_flat: torch.Tensor,
    dataset: FederatedDataset,
    clients: Sequence[int],
    config: LocalTrainingConfig,
    *,
    seed: int,
    round_index: int,
    max_batch_clients: int | None = None,
) -> torch.Tensor:
    """Updates ``[n, d]`` (``w_i - w_global``), ``max_batch_clients`` clients per vmap."""
    device, dtype = global_flat.device, global_flat.dtype
    shapes = param_shapes(model)
    gradients = per_client_gradients(model)
    chunk = len(clients) if max_batch_clients is None else max_batch_clients
    updates = torch.empty(len(clients), global_flat.numel(), device=device, dtype=dtype)
    for start in range(0, len(clients), max(chunk, 1)):
        members = list(clients[start : start + chunk])
        x, y = gather_batches(
            dataset, members, config, seed=seed, round_index=round_index, device=device, dtype=dtype
        )
        weights = global_flat.expand(len(members), -1).clone()
        velocity = torch.zeros_like(weights) if config.momentum else None
        for step in range(config.local_steps):
            grads = gradients(unflatten_params(weights, shapes), x[:, step], y[:, step])
            direction = flatten_params(grads, batch_dims=1)
            if config.weight_decay:
                direction = direction.add(weights, alpha=config.weight_decay)
            if velocity is not None:
                velocity.mul_(config.momentum).add_(direction)
                direction = velocity
            weights.add_(direction, alpha=-config.lr)
        updates[start : start + len(members)] = weights - global_flat
    return updates
