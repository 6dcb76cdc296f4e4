"""Parameter dictionaries <-> flat vectors (``docs/trainer.md``, "Local training engines").

The round engine clips, noises, encodes and aggregates flat vectors; models want named
tensors. The order of coordinates is the order of ``model.named_parameters()``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn


def param_shapes(model: nn.Module) -> dict[str, torch.Size]:
    """Name -> shape of every parameter, in ``named_parameters`` order."""
    return {name: parameter.shape for name, parameter in model.named_parameters()}


def num_params(model: nn.Module) -> int:
    """Number of scalar parameters, ``d``."""
    return sum(parameter.numel() for parameter in model.parameters())


def flatten_params(
    params: Mapping[str, torch.Tensor] | nn.Module, batch_dims: int = 0
) -> torch.Tensor:
    """Concatenate tensors (or a model's parameters) into ``[*batch, d]``.

    With ``batch_dims = k`` every tensor's first ``k`` dimensions are kept (stacked
    per-client parameters ``[n, ...]`` flatten to ``[n, d]``). Detached from autograd.
    """
    tensors: list[torch.Tensor] = (
        [p for _, p in params.named_parameters()] if isinstance(params, nn.Module) else list(params.values())
    )
    if not tensors:
        raise ValueError("no parameters to flatten")
    lead = tensors[0].shape[:batch_dims]
    return torch.cat([t.detach().reshape(*lead, -1) for t in tensors], dim=-1)


def unflatten_params(
    flat: torch.Tensor, shapes: Mapping[str, torch.Size] | nn.Module
) -> dict[str, torch.Tensor]:
    """Split ``[*batch, d]`` into named views ``[*batch, *shape]`` (no copy)."""
    if isinstance(shapes, nn.Module):
        shapes = param_shapes(shapes)
    lead = flat.shape[:-1]
    total = sum(int(torch.Size(shape).numel()) for shape in shapes.values())
    if flat.shape[-1] != total:
        raise ValueError(f"flat vector has {flat.shape[-1]} coordinates, the model {total}")
    out: dict[str, torch.Tensor] = {}
    start = 0
    for name, shape in shapes.items():
        size = int(torch.Size(shape).numel())
        out[name] = flat[..., start : start + size].reshape(*lead, *shape)
        start += size
    return out
