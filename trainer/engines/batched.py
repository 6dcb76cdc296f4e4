"""All clients at once with ``torch.func`` (``docs/trainer.md``, "Local training engines").

The clients' parameters are one matrix ``W`` of shape ``[n, d]`` (row ``i`` is client
``i``'s flat parameters, each starting at its start point: ``w_global`` or the caller's
``start`` row). One local step for all clients is

    G = per-client gradients of the mean minibatch loss           # [n, d]
    G = G + prox * (W - A)          (only with a proximal term; A the anchor rows)
    G = G + weight_decay * W;  B = momentum * B + G;  W = W - lr * B

which is exactly ``torch.optim.SGD`` applied to every row separately. The forward pass
is ``vmap(functional_call)`` over the clients, so each layer runs as one batched kernel
(grouped convolutions, batched matrix products) and the Python cost of a step is paid
once for all clients. The gradients come one of two equal ways:

* ``vmap(grad(loss))`` (default): per-client gradients as ``torch.func`` composes them;
* ``grad`` of ``sum_i L_i(W_i)`` with respect to ``W``: since client ``i``'s loss depends
  only on row ``i``, row ``i`` of this gradient is ``grad L_i(W_i)``. One backward pass
  through the batched graph; chosen by models whose weights are reused many times per
  sample (the LSTM's recurrent matrix, 80 times per sequence), where ``vmap(grad)``
  accumulates every reuse's weight gradient out of place and runs about twice as slowly.
  A model opts in with the class attribute ``batched_gradients = "summed"``.

Clients are processed in chunks of ``max_batch_clients`` to bound memory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from trainer.data.dataset import FederatedDataset
from trainer.engines.batches import gather_batches
from trainer.engines.config import LocalTrainingConfig
from trainer.engines.losses import mean_loss, summed_loss
from trainer.engines.params import flatten_params, param_shapes, unflatten_params

Gradients = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def vmap_gradients(model: nn.Module, shapes: Mapping[str, torch.Size], task: str = "classification") -> Gradients:
    """``(W [n, d], x [n, B, ...], y [n, B]) -> [n, d]`` by ``vmap(grad(mean loss))``."""

    def loss(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return mean_loss(task, functional_call(model, params, (x,)), y)

    per_client = vmap(grad(loss))

    def gradients(weights: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return flatten_params(per_client(unflatten_params(weights, shapes), x, y), batch_dims=1)

    return gradients


def summed_gradients(model: nn.Module, shapes: Mapping[str, torch.Size], task: str = "classification") -> Gradients:
    """The same as ``vmap_gradients``, as the gradient of ``sum_i L_i(W_i)`` w.r.t. ``W``."""
    forward = vmap(lambda params, x: functional_call(model, params, (x,)))

    def gradients(weights: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        leaf = weights.detach().requires_grad_()
        logits = forward(unflatten_params(leaf, shapes), x)
        # Mean over each client's batch, summed over clients.
        total = summed_loss(task, logits.flatten(0, 1), y.flatten()) / y.shape[1]
        return torch.autograd.grad(total, leaf)[0]

    return gradients


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
    start: torch.Tensor | None = None,
    anchor: torch.Tensor | None = None,
    prox: torch.Tensor | None = None,
) -> torch.Tensor:
    """Updates ``[n, d]`` (``w_i - s_i``), ``max_batch_clients`` clients per vmap.

    ``start`` (``[n, d]``) replaces ``w_global`` as the start points; ``prox`` (``[n]``,
    validated by ``train_clients``) adds ``prox_i (w - a_i)`` to client ``i``'s gradient,
    ``a_i`` the row of ``anchor`` (``[d]`` or ``[n, d]``).
    """
    device, dtype = global_flat.device, global_flat.dtype
    shapes = param_shapes(model)
    if getattr(model, "batched_gradients", "vmap") == "summed":
        gradients = summed_gradients(model, shapes, dataset.task)
    else:
        gradients = vmap_gradients(model, shapes, dataset.task)
    chunk = len(clients) if max_batch_clients is None else max_batch_clients
    updates = torch.empty(len(clients), global_flat.numel(), device=device, dtype=dtype)
    for start_at in range(0, len(clients), chunk):
        members = list(clients[start_at : start_at + chunk])
        x, y = gather_batches(
            dataset, members, config, seed=seed, round_index=round_index, device=device, dtype=dtype
        )
        rows = slice(start_at, start_at + len(members))
        if start is None:
            origin = global_flat.expand(len(members), -1)
        else:
            origin = start[rows].to(device=device, dtype=dtype)
        weights = origin.clone()
        pull: tuple[torch.Tensor, torch.Tensor] | None = None  # (rates [m, 1], anchors)
        if prox is not None:
            assert anchor is not None
            pull = (
                prox[rows].to(device=device, dtype=dtype).unsqueeze(1),
                (anchor if anchor.dim() == 1 else anchor[rows]).to(device=device, dtype=dtype),
            )
        velocity = torch.zeros_like(weights) if config.momentum else None
        for step in range(config.local_steps):
            direction = gradients(weights, x[:, step], y[:, step])
            if pull is not None:
                direction = direction.add(pull[0] * (weights - pull[1]))
            if config.weight_decay:
                direction = direction.add(weights, alpha=config.weight_decay)
            if velocity is not None:
                velocity.mul_(config.momentum).add_(direction)
                direction = velocity
            weights.add_(direction, alpha=-config.lr)
        updates[rows] = weights - origin
    return updates
