"""The DP-SGD engine's fast path (docs/mrmtl.md §4.1): ghost clipping's clipped sums equal
the torch.func path's and a plain per-example loop's (float64) for the linear model, the MLP
and the CNN, over silos with different weights, padding rows and clip factors on both
sides of the clip, for classification and regression; a pass of the engine leaves the
same weights either way; models that are not a chain of supported layers keep torch.func."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from trainer.data.silos import load_silo_data, mean_estimation
from trainer.engines.params import flatten_params, param_shapes, unflatten_params
from trainer.models import build_model
from trainer.strategies.base import RoundContext
from trainer.units.silo.dpsgd import DpSgdEngine, SiloMechanism, clipped_sum, example_loss, per_example_gradients
from trainer.units.silo.ghost import chain_layers, conv_mode, ghost_clipped_sum

SILOS, WIDTH = 3, 7


def loop_reference(model: nn.Module, weights: torch.Tensor, x: torch.Tensor, y: torch.Tensor, valid: torch.Tensor,
                   clip: float, task: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The clipped sums and every example's gradient norm, one example at a time."""
    shapes = param_shapes(model)
    sums = torch.zeros_like(weights)
    norms = torch.zeros(valid.shape, dtype=weights.dtype)
    for k in range(weights.shape[0]):
        for i in range(x.shape[1]):
            leaf = weights[k].clone().requires_grad_()
            (g,) = torch.autograd.grad(example_loss(model, unflatten_params(leaf, shapes), x[k, i], y[k, i], task), leaf)
            norms[k, i] = g.norm()
            if valid[k, i]:
                sums[k] += g * min(1.0, clip / float(g.norm()))
    return sums, norms


def case(model_name: str, task: str, **options: Any) -> tuple[nn.Module, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A model, silo weights that differ, and ``[K, P]`` examples (float64)."""
    if task == "regression":
        data = mean_estimation([20] * SILOS, seed=0)
    else:
        data = load_silo_data("rotated_digits", [20] * SILOS, seed=0)
    model = build_model(model_name, data.train, seed=0, **options).double()
    base = flatten_params(model)
    weights = base + 0.5 * torch.randn(SILOS, base.numel(), generator=torch.Generator().manual_seed(1), dtype=base.dtype)
    rows = torch.stack([data.train.client_indices[k][:WIDTH] for k in range(SILOS)])
    x = data.train.train_x[rows].double()
    y = data.train.train_y[rows]
    return model, weights, x, y.double() if task == "regression" else y


MODELS = [
    ("linear", "mlp", "classification", {"hidden": []}),
    ("mlp", "mlp", "classification", {"hidden": [12, 9]}),
    ("cnn", "cnn", "classification", {"channels": (3, 4), "hidden": 10}),
    ("mlp regression", "mlp", "regression", {"hidden": [6]}),
    ("linear regression no bias", "mlp", "regression", {"hidden": [], "bias": False}),
]


@pytest.mark.parametrize("label, model_name, task, options", MODELS, ids=[m[0] for m in MODELS])
def test_ghost_clipped_sum_equals_torch_func_and_a_loop(label: str, model_name: str, task: str,
                                                        options: dict[str, Any]) -> None:
    model, weights, x, y = case(model_name, task, **options)
    shapes = param_shapes(model)
    layers = chain_layers(model, shapes, x.shape[2:])
    assert layers is not None, label
    valid = torch.ones(SILOS, WIDTH, dtype=torch.bool)
    valid[0, -2:] = False  # padding rows
    valid[2, -1] = False
    _, norms = loop_reference(model, weights, x, y, valid, 1.0, task)
    clip = float(norms[valid].median())  # about half the examples clipped, half not
    assert bool((norms[valid] > clip * 1.01).any()) and bool((norms[valid] < clip * 0.99).any())
    expected, _ = loop_reference(model, weights, x, y, valid, clip, task)
    via_func = clipped_sum(per_example_gradients(model, shapes, task)(weights, x, y, weights, 0.0), valid, clip)
    modes = ("materialise", "ghost") if model_name == "cnn" else (None,)
    for mode in modes:
        fast = ghost_clipped_sum(layers, weights, x, y, valid, clip, task, force_conv=mode)
        assert fast.shape == expected.shape
        assert torch.allclose(fast, expected, rtol=1e-10, atol=1e-12), (mode, float((fast - expected).abs().max()))
        assert torch.allclose(fast, via_func, rtol=1e-10, atol=1e-12), mode
    assert float(expected.abs().max()) > 1e-3


def test_conv_mode_is_bu_et_al_s_rule() -> None:
    # ghost iff 2 T^2 < O U: the CNN's second layer (O U = 64 * 800, T = 16) goes ghost, its first (32 * 25, T = 64) not
    assert conv_mode(unfolded=800, outputs=64, positions=16) == "ghost"
    assert conv_mode(unfolded=25, outputs=32, positions=64) == "materialise"
    assert conv_mode(unfolded=50, outputs=20, positions=22) == "ghost"  # 968 < 1000
    assert conv_mode(unfolded=50, outputs=20, positions=23) == "materialise"  # 1058 > 1000


class LinearSubclass(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x).tanh()


class Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.flat, self.a, self.b = nn.Flatten(), nn.Linear(64, 64), nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.flat(x)
        return self.b(h + self.a(h))


class Shared(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.flat, self.a, self.b = nn.Flatten(), nn.Linear(64, 64), nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(self.a(self.flat(x))))


@pytest.mark.parametrize("model", [
    Residual(), Shared(),
    nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.Tanh(), nn.Linear(8, 10)),  # unsupported layer
    nn.Sequential(nn.Conv2d(1, 4, 3, groups=1, padding="same"), nn.Flatten(), nn.Linear(256, 10)),  # padding="same"
    nn.Sequential(nn.Linear(8, 10), nn.Flatten()),  # a Linear over [1, C, H, W] (not one vector per example)
    nn.Sequential(nn.Flatten(), LinearSubclass(64, 10)),  # a subclass may compute something else
], ids=["residual", "shared", "tanh", "padding-same", "linear-over-image", "subclass"])
def test_models_that_are_not_a_chain_of_supported_layers_keep_torch_func(model: nn.Module) -> None:
    assert chain_layers(model, param_shapes(model), (1, 8, 8)) is None


def test_the_engine_reports_its_path() -> None:
    data = load_silo_data("rotated_digits", [20, 20], seed=0)
    mechanism = SiloMechanism(sampling_rates=(0.5, 0.5), noise_multipliers=(1.0, 1.0), clip_norm=1.0,
                              steps_per_pass=(2, 2), passes=1, num_samples=(20, 20))
    mlp = build_model("mlp", data.train, seed=0, hidden=[8])
    assert DpSgdEngine(mlp, data.train, [0, 1], mechanism, lr=0.1).gradient_path == "ghost"
    assert DpSgdEngine(mlp, data.train, [0, 1], mechanism, lr=0.1, prox_inside_clip=True).gradient_path == "torch.func"
    assert DpSgdEngine(mlp, data.train, [0, 1], mechanism, lr=0.1, ghost_clipping=False).gradient_path == "torch.func"
    toy = mean_estimation([20, 20], seed=0)  # the scalar mean model: a bare parameter, not a layer
    mean = build_model("mean", toy.train, seed=0)
    assert DpSgdEngine(mean, toy.train, [0, 1], mechanism, lr=0.1).gradient_path == "torch.func"


@pytest.mark.parametrize("model_name, options", [("mlp", {"hidden": [16]}), ("cnn", {"channels": (3, 4), "hidden": 10})])
def test_a_pass_trains_the_same_weights_on_either_path(model_name: str, options: dict[str, Any]) -> None:
    sizes = [30, 40, 25]
    data = load_silo_data("rotated_digits", sizes, seed=0)
    model = build_model(model_name, data.train, seed=0, **options)
    mechanism = SiloMechanism(sampling_rates=(0.3, 0.2, 0.4), noise_multipliers=(0.8, 1.1, 0.5), clip_norm=0.5,
                              steps_per_pass=(4, 3, 4), passes=1, num_samples=tuple(sizes))
    base = flatten_params(model).double()
    start = base + 0.2 * torch.randn(3, base.numel(), generator=torch.Generator().manual_seed(3), dtype=base.dtype)
    anchor = base.expand(3, -1)
    trained = {}
    for fast in (True, False):
        engine = DpSgdEngine(model, data.train, [0, 1, 2], mechanism, lr=0.2, ghost_clipping=fast)
        assert engine.gradient_path == ("ghost" if fast else "torch.func")
        trained[fast] = engine.train(RoundContext(0, 0, seed=4), start, anchor=anchor, prox=0.3)
    assert float((trained[True] - start).abs().max()) > 1e-3  # it moved
    assert torch.allclose(trained[True], trained[False], rtol=1e-9, atol=1e-11)


def _scale_output(module: nn.Module, inputs: Any, output: torch.Tensor) -> torch.Tensor:
    return 3.0 * output


@pytest.mark.parametrize("hook", ["forward", "forward_pre", "full_backward", "global_forward"])
def test_a_hooked_model_keeps_torch_func(hook: str) -> None:
    """``functional_call`` runs a module's hooks and the ghost path's batched re-implementation
    would not (the fresh-eyes review measured clipped sums 63% off with a forward hook scaling
    a layer's output): any hook, on a module or global, sends the model to torch.func."""
    from torch.nn.modules import module as torch_module

    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.ReLU(), nn.Linear(8, 10))
    assert chain_layers(model, param_shapes(model), (1, 8, 8)) is not None
    if hook == "forward":
        handle = model[1].register_forward_hook(_scale_output)
    elif hook == "forward_pre":
        handle = model[3].register_forward_pre_hook(lambda module, inputs: (5.0 * inputs[0],))
    elif hook == "full_backward":
        handle = model[1].register_full_backward_hook(lambda module, grad_in, grad_out: None)
    else:
        handle = torch_module.register_module_forward_hook(_scale_output)
    try:
        assert chain_layers(model, param_shapes(model), (1, 8, 8)) is None
    finally:
        handle.remove()
    assert chain_layers(model, param_shapes(model), (1, 8, 8)) is not None


def test_a_hook_added_after_the_engine_was_built_sends_its_steps_to_torch_func() -> None:
    sizes = [30, 40]
    data = load_silo_data("rotated_digits", sizes, seed=0)
    model = build_model("mlp", data.train, seed=0, hidden=[16]).double()
    mechanism = SiloMechanism(sampling_rates=(0.3, 0.2), noise_multipliers=(0.8, 1.1), clip_norm=0.5,
                              steps_per_pass=(3, 3), passes=1, num_samples=tuple(sizes))
    start = flatten_params(model).expand(2, -1).clone()
    engine = DpSgdEngine(model, data.train, [0, 1], mechanism, lr=0.2)
    reference = DpSgdEngine(model, data.train, [0, 1], mechanism, lr=0.2, ghost_clipping=False)
    assert engine.gradient_path == "ghost"
    handle = model.layers[1].register_forward_hook(_scale_output)
    try:
        assert engine.gradient_path == "torch.func"
        hooked = engine.train(RoundContext(0, 0, seed=4), start)
        expected = reference.train(RoundContext(0, 0, seed=4), start)
    finally:
        handle.remove()
    assert torch.allclose(hooked, expected, rtol=1e-9, atol=1e-11)
    assert engine.gradient_path == "ghost"
