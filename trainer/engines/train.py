"""``train_clients``: local training of a round's clients (``docs/trainer.md``, "Local training engines")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import torch
from torch import nn

from accounting.errors import InvalidInputError
from trainer.data.dataset import FederatedDataset
from trainer.engines.batched import train_batched
from trainer.engines.config import LocalTrainingConfig
from trainer.engines.loop import train_loop
from trainer.engines.params import flatten_params, num_params

ENGINES = ("loop", "batched")
Engine = Literal["loop", "batched"]


def train_clients(
    engine: Engine,
    model: nn.Module,
    global_params: torch.Tensor | Mapping[str, torch.Tensor],
    dataset: FederatedDataset,
    client_indices: Sequence[int],
    config: LocalTrainingConfig,
    *,
    seed: int,
    round_index: int,
    device: torch.device | str,
    max_batch_clients: int | None = None,
) -> torch.Tensor:
    """Updates ``Delta_i = w_i - w_global`` of the clients, ``[len(client_indices), d]``.

    Every client starts from ``global_params`` (a flat ``[d]`` vector in
    ``model.named_parameters()`` order, or a name -> tensor mapping), runs
    ``config.local_steps`` SGD steps on the minibatches fixed by ``(seed, round_index,
    client)`` (``trainer/engines/batches.py``) and returns its update, on ``device`` in the
    dtype of ``global_params``. ``engine`` ``loop`` and ``batched`` give the same updates up
    to floating-point reduction order. ``max_batch_clients`` bounds how many clients the
    batched engine trains in one ``vmap`` (memory); it does not change the result.
    """
    if engine not in ENGINES:
        raise InvalidInputError("engine", f"unknown engine {engine!r}; use loop or batched")
    if max_batch_clients is not None and max_batch_clients < 1:
        raise InvalidInputError("max_batch_clients", f"must be at least 1, got {max_batch_clients}")
    if any(True for _ in model.buffers()):
        raise InvalidInputError(
            "model", "has buffers (BatchNorm?); per-client training needs a buffer-free model"
        )
    flat = global_params if isinstance(global_params, torch.Tensor) else flatten_params(global_params)
    if flat.dim() != 1 or flat.numel() != num_params(model):
        raise InvalidInputError(
            "global_params", f"must be a flat vector of {num_params(model)} values, got shape {list(flat.shape)}"
        )
    flat = flat.detach().to(torch.device(device))
    clients = [int(c) for c in client_indices]
    if not clients:
        return flat.new_zeros(0, flat.numel())
    if engine == "loop":
        return train_loop(model, flat, dataset, clients, config, seed=seed, round_index=round_index)
    return train_batched(
        model,
        flat,
        dataset,
        clients,
        config,
        seed=seed,
        round_index=round_index,
        max_batch_clients=max_batch_clients,
    )
