"""Our DP-SGD step against Opacus' (docs/mrmtl.md §4): the same model, examples, clip,
expected batch and standard-normal draws give the same parameters after one step, with
the noise zeroed and with noise. Opacus (``GradSampleModule`` + ``DPOptimizer``) is the
independent implementation; it is in the ``dev`` extra, so CI fails rather than skips
where it is missing."""

from __future__ import annotations

import copy
import os

import pytest
import torch
from torch.nn import functional as F

from trainer.data.silos import load_silo_data
from trainer.engines.params import flatten_params, param_shapes, unflatten_params
from trainer.models import build_model
from trainer.units.silo.dpsgd import DpSgdEngine, SiloMechanism


def opacus_or_skip() -> None:
    try:
        import opacus  # noqa: F401
    except ImportError:
        # .ci/run installs the dev extra, which has opacus: there its absence is a failure
        (pytest.fail if os.environ.get("CI") == "true" else pytest.skip)("opacus is not installed (pip install -e '.[dev]')")


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")  # Opacus' hooks on an input without grad
@pytest.mark.parametrize("noise_multiplier", [0.0, 1.3])
def test_one_step_equals_opacus(noise_multiplier: float) -> None:
    opacus_or_skip()
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    torch.manual_seed(0)
    samples, expected_batch, sampled, pad, clip, lr = 40, 10, 13, 16, 5.0, 0.3
    data = load_silo_data("rotated_digits", [samples], seed=0)
    model = build_model("mlp", data.train, seed=0, hidden=[8])
    shapes = param_shapes(model)
    weights = flatten_params(model)[None] + 0.2 * torch.randn(1, sum(s.numel() for s in shapes.values()))
    mechanism = SiloMechanism(sampling_rates=(expected_batch / samples,), noise_multipliers=(noise_multiplier,),
                              clip_norm=clip, steps_per_pass=(1,), passes=1, num_samples=(samples,))
    engine = DpSgdEngine(model, data.train, [0], mechanism, lr=lr)

    # a realised Poisson sample of 13 examples (above the expected 10) in a batch padded to 16
    rows = data.train.client_indices[0][:sampled]
    x, y = data.train.train_x[rows], data.train.train_y[rows]
    x_pad = torch.cat([x, x[:1].expand(pad - sampled, *x.shape[1:])])[None]
    y_pad = torch.cat([y, y[:1].expand(pad - sampled)])[None]
    valid = (torch.arange(pad) < sampled)[None]

    # Opacus draws N(0, (sigma c)^2) per parameter tensor, in parameter order, from its generator
    peer = copy.deepcopy(model)
    peer.load_state_dict(unflatten_params(weights[0], shapes))
    wrapped = GradSampleModule(peer, loss_reduction="mean")
    optimizer = DPOptimizer(torch.optim.SGD(wrapped.parameters(), lr=lr), noise_multiplier=noise_multiplier,
                            max_grad_norm=clip, expected_batch_size=expected_batch, loss_reduction="mean",
                            generator=torch.Generator().manual_seed(7))
    F.cross_entropy(wrapped(x), y).backward()
    norms = torch.cat([p.grad_sample.reshape(sampled, -1) for p in wrapped.parameters()], 1).norm(dim=1)
    assert bool((norms > clip).any()) and bool((norms < clip).any()), norms  # both sides of the clip are exercised
    optimizer.step()
    opacus_after = flatten_params(wrapped._module)

    draws = torch.Generator().manual_seed(7)
    std = noise_multiplier * clip
    noise = torch.cat([
        (torch.normal(0.0, std, size=s, generator=draws) / std if std else torch.zeros(s)).reshape(-1)
        for s in shapes.values()
    ])[None]
    ours_after = weights - lr * engine.noisy_gradient(weights, x_pad, y_pad, valid, weights, 0.0, noise)
    assert torch.allclose(ours_after, opacus_after[None], atol=1e-5), float((ours_after - opacus_after).abs().max())
    if noise_multiplier:  # the noise really moved both (not a zero-noise comparison twice)
        silent = weights - lr * engine.noisy_gradient(weights, x_pad, y_pad, valid, weights, 0.0, torch.zeros_like(noise))
        assert float((silent - ours_after).abs().max()) > 1e-2
