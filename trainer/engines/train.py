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
    start: torch.Tensor | None = None,
    anchor: torch.Tensor | None = None,
    prox: float | Sequence[float] | torch.Tensor = 0.0,
) -> torch.Tensor:
    """Updates ``Delta_i = w_i - s_i`` of the clients, ``[len(client_indices), d]``.

    Client ``i`` starts from ``s_i``: row ``i`` of ``start`` (``[n, d]``, e.g. its personal
    model) or, without ``start``, ``global_params`` (a flat ``[d]`` vector in
    ``model.named_parameters()`` order, or a name -> tensor mapping). It runs
    ``config.local_steps`` SGD steps on the minibatches fixed by ``(seed, round_index,
    client)`` (``trainer/engines/batches.py``), so two calls for the same clients and round
    read the same batches, and returns its update on ``device`` in the dtype of
    ``global_params``. With ``prox`` ``mu_i > 0`` the step's gradient gains the proximal
    term ``mu_i (w - a_i)`` of ``(mu_i / 2) ||w - a_i||^2`` towards the anchor ``a_i``
    (``anchor``: ``[d]`` shared or ``[n, d]`` per client; ``global_params`` without one),
    docs/trainer.md §Local training engines. ``engine`` ``loop`` and ``batched`` give the
    same updates up to floating-point reduction order. ``max_batch_clients`` bounds how
    many clients the batched engine trains in one ``vmap`` (memory); it does not change the
    result.
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
    start_rows, anchor_rows, prox_rates = _start_and_anchor(flat, len(clients), start, anchor, prox)
    if engine == "loop":
        return train_loop(
            model, flat, dataset, clients, config, seed=seed, round_index=round_index,
            start=start_rows, anchor=anchor_rows, prox=prox_rates,
        )
    return train_batched(
        model,
        flat,
        dataset,
        clients,
        config,
        seed=seed,
        round_index=round_index,
        max_batch_clients=max_batch_clients,
        start=start_rows,
        anchor=anchor_rows,
        prox=prox_rates,
    )


def _start_and_anchor(
    flat: torch.Tensor,
    count: int,
    start: torch.Tensor | None,
    anchor: torch.Tensor | None,
    prox: float | Sequence[float] | torch.Tensor,
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """Validated ``(start [n, d] | None, anchor [d] | [n, d] | None, prox [n] | None)``.

    ``start`` and ``anchor`` stay where the caller keeps them (personal models live on the
    host); the engines move one chunk at a time to the device. ``prox`` is ``None`` when
    every rate is zero (no proximal term, the plain step); the anchor is then unused.
    """
    dim = flat.numel()
    if start is not None and (start.dim() != 2 or tuple(start.shape) != (count, dim)):
        raise InvalidInputError("start", f"must be [{count}, {dim}] (one row per client), got {list(start.shape)}")
    rates = torch.as_tensor(prox, dtype=torch.float64).detach().cpu().reshape(-1)
    if rates.numel() == 1:
        rates = rates.expand(count)
    if rates.numel() != count:
        raise InvalidInputError("prox", f"must be one number or one per client ({count}), got {rates.numel()}")
    if not bool(torch.isfinite(rates).all()) or bool((rates < 0).any()):
        raise InvalidInputError("prox", "must be finite and non-negative")
    if not bool((rates > 0).any()):
        return start, None, None
    if anchor is None:
        anchor = flat
    if not (tuple(anchor.shape) == (dim,) or tuple(anchor.shape) == (count, dim)):
        raise InvalidInputError(
            "anchor", f"must be [{dim}] (shared) or [{count}, {dim}] (per client), got {list(anchor.shape)}"
        )
    return start, anchor.detach(), rates
