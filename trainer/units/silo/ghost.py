"""Clipped per-example gradient sums without per-example gradients, for chains of layers
(docs/mrmtl.md §4.1).

For silos k with weights ``W [K, d]`` and examples ``x [K, P, ...]`` this returns what
``trainer.units.silo.dpsgd.clipped_sum(per_example_gradients(...))`` returns,

    out_k = sum_i valid_ki min(1, c / ||g_ki||) g_ki        (g_ki = grad of example i's loss at W_k)

in ``named_parameters`` order, from one batched forward pass over silos x examples and one
backward pass to the layers' outputs only (ghost clipping: Goodfellow 2015, "Efficient
per-example gradient computations"; Li et al. 2022, "Large language models can be strong
differentially private learners"; Bu et al. 2023, "Differentially private optimization on
large model at small cost", mixed ghost clipping). A layer with input ``a_i`` and output
``z_i = W a_i + b`` has per-example gradient ``dL_i/dz_i a_i^T``, and ``dL_i/dz_i`` is the
gradient of the summed loss with respect to ``z_i`` (examples are independent), so:

* Linear: ``||g_i||^2 = ||dz_i||^2 ||a_i||^2 (+ ||dz_i||^2 for the bias)``, and the clipped
  sum is ``sum_i c_i dz_i a_i^T`` (one batched matrix product per layer).
* Conv2d: with ``U_i`` the unfolded input ``[C k_h k_w, T]`` and ``dz_i`` ``[O, T]``, either
  the per-example gradient ``dz_i U_i^T`` is formed (Opacus' way) or its squared norm is
  ``sum_{t,s} (U_i^T U_i)_{ts} (dz_i^T dz_i)_{ts}`` (the ghost norm) and the clipped sum is
  ``sum_{i,t} c_i dz_{i,t} U_{i,t}^T`` (the grouped convolution's weight gradient for the
  output gradient ``c_i dz_i``); which one by Bu et al.'s rule (``conv_mode``).

Supported: ``torch.fx``-traceable models that are a straight chain of Linear, Conv2d
(``groups=1``, zero padding), ReLU, MaxPool2d, Flatten (``start_dim=1``) and Identity,
each parameter in exactly one layer, each layer used once, no forward or backward hooks
(checked again before every use: ``has_hooks``); anything else (recurrent
layers, shared weights, branches, other modules) gets ``None`` from ``chain_layers`` and
the engine keeps its ``torch.func`` path. Device-agnostic: everything runs where the
weights are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

# exact types: a subclass may override forward (the batched form re-implements each layer)
CHAIN_TYPES = (nn.Linear, nn.Conv2d, nn.ReLU, nn.MaxPool2d, nn.Flatten, nn.Identity)


@dataclass(frozen=True)
class Layer:
    """One layer of the chain: its module and, for Linear and Conv2d, where its weight and
    bias sit in the flat parameter vector (``[start, stop)`` and shape)."""

    module: nn.Module
    weight: tuple[int, int, torch.Size] | None = None
    bias: tuple[int, int, torch.Size] | None = None


def _offsets(shapes: Mapping[str, torch.Size]) -> dict[str, tuple[int, int, torch.Size]]:
    out, start = {}, 0
    for name, shape in shapes.items():
        size = int(torch.Size(shape).numel())
        out[name] = (start, start + size, torch.Size(shape))
        start += size
    return out


def _supported(module: nn.Module) -> bool:
    if type(module) not in CHAIN_TYPES:
        return False
    if isinstance(module, nn.MaxPool2d):
        return not module.return_indices
    if isinstance(module, nn.Conv2d):
        return module.groups == 1 and module.padding_mode == "zeros" and not isinstance(module.padding, str)
    if isinstance(module, nn.Flatten):
        return module.start_dim == 1 and module.end_dim == -1
    return True


def has_hooks(model: nn.Module) -> bool:
    """Whether any forward or backward hook (on a module of ``model`` or global) could change
    what the model computes: ``functional_call`` runs them, the batched re-implementation of
    the chain here would not, so a hooked model keeps the ``torch.func`` path."""
    from torch.nn.modules import module as torch_module

    global_hooks = (torch_module._global_forward_hooks, torch_module._global_forward_pre_hooks,
                    torch_module._global_backward_hooks, torch_module._global_backward_pre_hooks)
    if any(global_hooks):
        return True
    return any(m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks
               for m in model.modules())


def chain_layers(model: nn.Module, shapes: Mapping[str, torch.Size], input_shape: Sequence[int]) -> list[Layer] | None:
    """The model as a list of supported layers applied one after another, or ``None``.

    ``torch.fx.symbolic_trace`` gives the graph; it must be input -> module -> ... -> module
    -> output with every module call taking the previous one's result only. A forward pass
    of one zero example checks that Linear layers see ``[1, in]`` and Conv2d ``[1, C, H, W]``
    and that the output is ``[1, outputs]`` (the shapes the batched form assumes)."""
    if not shapes or has_hooks(model):
        return None
    try:
        graph = torch.fx.symbolic_trace(model).graph
    except Exception:  # untraceable (data-dependent control flow): not a chain
        return None
    named = dict(model.named_modules())
    offsets = _offsets(shapes)
    layers: list[Layer] = []
    covered: set[str] = set()
    previous = None
    for node in graph.nodes:
        if node.op == "placeholder":
            if previous is not None:
                return None
            previous = node
        elif node.op == "call_module":
            module = named[str(node.target)]
            if node.args != (previous,) or node.kwargs or not _supported(module):
                return None
            weight = bias = None
            for attribute in ("weight", "bias"):
                if getattr(module, attribute, None) is None:
                    continue
                name = f"{node.target}.{attribute}"
                if name not in offsets or name in covered:
                    return None  # a frozen or shared parameter: not this path's case
                covered.add(name)
                if attribute == "weight":
                    weight = offsets[name]
                else:
                    bias = offsets[name]
            if isinstance(module, (nn.Linear, nn.Conv2d)) and weight is None:
                return None
            layers.append(Layer(module, weight, bias))
            previous = node
        elif node.op == "output":
            if node.args != (previous,) or previous is None or previous.op != "call_module":
                return None
        else:
            return None
    if covered != set(shapes) or not layers:
        return None
    parameter = next(model.parameters())
    h = torch.zeros(1, *input_shape, dtype=parameter.dtype, device=parameter.device)
    with torch.no_grad():
        for layer in layers:
            if isinstance(layer.module, nn.Linear) and h.dim() != 2:
                return None
            if isinstance(layer.module, nn.Conv2d) and h.dim() != 4:
                return None
            h = layer.module(h)
    return layers if h.dim() == 2 else None


def conv_mode(unfolded: int, outputs: int, positions: int) -> str:
    """``"ghost"`` or ``"materialise"`` for a Conv2d whose per-example gradient is
    ``[outputs, unfolded]`` over ``positions`` output positions: Bu et al.'s (2023) mixed
    ghost clipping rule, ghost iff ``2 T^2 < O U`` (the two ``[T, T]`` Gram matrices are
    smaller than the per-example gradient). A count of multiply-adds alone favours
    materialising whenever ``T^2 (U + O) > 2 O U``, but materialising writes and reads a
    ``[P K, O, U]`` tensor several times: for the CNN's second layer (``O U = 51200``,
    ``T = 16``) at 10 silos the ghost norm made a step 2.3x faster, for its first
    (``O U = 800``, ``T = 64``) materialising was as fast or faster (docs/mrmtl.md §4.1)."""
    return "ghost" if 2 * positions * positions < outputs * unfolded else "materialise"


def _slice(weights: torch.Tensor, where: tuple[int, int, torch.Size]) -> torch.Tensor:
    start, stop, shape = where
    return weights[:, start:stop].reshape(weights.shape[0], *shape)


def _leaf(z: torch.Tensor) -> torch.Tensor:
    """The first parametrised layer's output has no history (the weights are detached): it
    becomes the leaf the backward pass stops at; later outputs depend on it."""
    return z if z.requires_grad else z.requires_grad_()


def _summed_loss(output: torch.Tensor, y: torch.Tensor, task: str) -> torch.Tensor:
    """``sum_i`` of ``trainer.units.silo.dpsgd.example_loss`` over ``output [K, P, O]``."""
    if task == "regression":
        return 0.5 * (output - y.reshape(*y.shape[:2], -1).to(output.dtype)).pow(2).sum()
    return F.cross_entropy(output.reshape(-1, output.shape[-1]), y.reshape(-1), reduction="sum")


def ghost_clipped_sum(layers: Sequence[Layer], weights: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                      valid: torch.Tensor, clip_norm: float, task: str, force_conv: str | None = None) -> torch.Tensor:
    """``sum_i valid_ki min(1, c / ||g_ki||) g_ki`` for every silo k: ``[K, d]`` (module docstring).

    Activations are kept ``[K, P, ...]`` ("kp") around Linear layers and ``[P, K, ...]``
    ("pk") around Conv2d, which runs all silos as one grouped convolution (groups = K,
    input ``[P, K C, H, W]``). ``force_conv`` overrides ``conv_mode`` (tests)."""
    with torch.enable_grad():
        return _clipped_sum(layers, weights.detach(), x, y, valid, clip_norm, task, force_conv)


def _clipped_sum(layers: Sequence[Layer], weights: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                 valid: torch.Tensor, clip_norm: float, task: str, force_conv: str | None) -> torch.Tensor:
    silos, width = x.shape[:2]
    h, layout = x, "kp"
    saved: list[tuple[Layer, torch.Tensor, torch.Tensor]] = []  # (layer, its input, its output)
    for layer in layers:
        module = layer.module
        if isinstance(module, nn.Linear):
            a = (h if layout == "kp" else h.transpose(0, 1)).reshape(silos, width, -1)
            w = _slice(weights, layer.weight).transpose(1, 2)  # type: ignore[arg-type]
            z = torch.bmm(a, w) if layer.bias is None else torch.baddbmm(
                _slice(weights, layer.bias)[:, None, :], a, w)
            h, layout = _leaf(z), "kp"
        elif isinstance(module, nn.Conv2d):
            a = (h.transpose(0, 1) if layout == "kp" else h).contiguous()  # [P, K, C, H, W]
            w = _slice(weights, layer.weight)  # type: ignore[arg-type]
            b = None if layer.bias is None else _slice(weights, layer.bias).reshape(-1)
            z = F.conv2d(a.reshape(width, -1, *a.shape[3:]), w.reshape(-1, *w.shape[2:]), b, module.stride,
                         module.padding, module.dilation, groups=silos)  # [P, K O, H', W']
            h, layout = _leaf(z).view(width, silos, -1, *z.shape[2:]), "pk"
        elif isinstance(module, nn.MaxPool2d):
            lead = h.shape[:2]
            pooled = F.max_pool2d(h.reshape(-1, *h.shape[2:]), module.kernel_size, module.stride, module.padding,
                                  module.dilation, module.ceil_mode)
            h = pooled.view(*lead, *pooled.shape[1:])
            continue
        elif isinstance(module, nn.Flatten):
            h = h.reshape(*h.shape[:2], -1)
            continue
        elif isinstance(module, nn.ReLU):
            h = torch.relu(h)  # never in place: a layer's output is kept for its gradient
            continue
        else:  # Identity
            continue
        saved.append((layer, a.detach(), z))
    output = h if layout == "kp" else h.transpose(0, 1)
    grads = torch.autograd.grad(_summed_loss(output, y, task), [z for _, _, z in saved])
    with torch.no_grad():
        return _from_output_gradients(saved, grads, weights, valid, clip_norm, force_conv)


def _from_output_gradients(saved: Sequence[tuple[Layer, torch.Tensor, torch.Tensor]], grads: Sequence[torch.Tensor],
                           weights: torch.Tensor, valid: torch.Tensor, clip_norm: float,
                           force_conv: str | None) -> torch.Tensor:
    """Per-example norms from each layer's input and output gradient, then the clipped sum."""
    silos, width = valid.shape

    squared = torch.zeros(silos, width, dtype=weights.dtype, device=weights.device)
    parts: list[tuple[Layer, torch.Tensor, torch.Tensor, torch.Tensor | None, str]] = []
    for (layer, a, _), dz in zip(saved, grads):
        if isinstance(layer.module, nn.Linear):
            dz_sq = dz.pow(2).sum(-1)
            squared += dz_sq * (a.pow(2).sum(-1) + (0.0 if layer.bias is None else 1.0))
            parts.append((layer, a, dz, None, "linear"))
            continue
        module = layer.module
        assert isinstance(module, nn.Conv2d)
        padding = module.padding
        assert not isinstance(padding, str)  # chain_layers admits numeric padding only
        unfolded = F.unfold(a.reshape(-1, *a.shape[2:]), module.kernel_size, module.dilation, padding,
                            module.stride)  # [P K, C kh kw, T]
        by_example = dz.reshape(width * silos, -1, unfolded.shape[-1])  # [P K, O, T]
        mode = force_conv or conv_mode(unfolded.shape[1], by_example.shape[1], by_example.shape[2])
        if mode == "materialise":
            per_example = torch.bmm(by_example, unfolded.transpose(1, 2))  # [P K, O, C kh kw]
            norms = per_example.pow(2).sum((1, 2))
        else:
            per_example = None
            norms = (torch.bmm(unfolded.transpose(1, 2), unfolded)
                     * torch.bmm(by_example.transpose(1, 2), by_example)).sum((1, 2))
        if layer.bias is not None:
            norms = norms + by_example.sum(-1).pow(2).sum(-1)
        squared += norms.view(width, silos).t()
        # the ghost mode's clipped sum is a convolution's weight gradient: keep the input, not U
        parts.append((layer, unfolded if per_example is not None else a, dz, per_example, mode))

    factors = torch.clamp(clip_norm / (squared.sqrt() + 1e-12), max=1.0) * valid.to(weights.dtype)  # [K, P]
    out = torch.empty_like(weights)
    for layer, a, dz, per_example, mode in parts:
        w_start, w_stop, _ = layer.weight  # type: ignore[misc]
        if mode == "linear":
            scaled = dz * factors[..., None]
            # written straight into its columns of ``out`` (assigning a result copied it once more)
            torch.bmm(scaled.transpose(1, 2), a, out=out[:, w_start:w_stop].view(silos, dz.shape[-1], a.shape[-1]))
            if layer.bias is not None:
                out[:, layer.bias[0]:layer.bias[1]] = scaled.sum(1)
            continue
        by_pk = factors.t().reshape(-1)  # [P K], the conv layout's example order
        module = layer.module
        assert isinstance(module, nn.Conv2d)
        by_example = dz.reshape(width * silos, module.out_channels, -1)  # [P K, O, T]
        if per_example is not None:  # [K, 1, P] x [K, P, O C kh kw] into the layer's columns
            torch.bmm(by_pk.view(width, silos).t()[:, None, :], per_example.view(width, silos, -1).transpose(0, 1),
                      out=out[:, w_start:w_stop].view(silos, 1, -1))
        else:
            # sum_{i,t} c_i dz_{i,t} U_{i,t}^T is the weight gradient of the grouped convolution
            # for the output gradient c_i dz_i: the convolution's own backward kernel computes it
            # (an einsum over the unfolded input copied U into [K, P T, C kh kw] first)
            scaled = (by_example * by_pk[:, None, None]).view_as(dz)
            w = _slice(weights, layer.weight)  # type: ignore[arg-type]
            _, summed, _ = torch.ops.aten.convolution_backward(
                scaled, a.reshape(width, -1, *a.shape[3:]), w.reshape(-1, *w.shape[2:]), None, module.stride,
                module.padding, module.dilation, False, [0, 0], silos, [False, True, False])
            out[:, w_start:w_stop] = summed.view(silos, -1)
        if layer.bias is not None:
            out[:, layer.bias[0]:layer.bias[1]] = torch.einsum("pk,pko->ko", by_pk.view(width, silos),
                                                               by_example.sum(-1).view(width, silos, -1))
    return out
