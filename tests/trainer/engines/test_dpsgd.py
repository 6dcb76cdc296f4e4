"""The DP-SGD engine of the silo_sample unit (docs/mrmtl.md §4): per-example clipping
against a loop, the noise it adds (chi-square), the Poisson masks (binomial), the prox
term outside or inside the clip, and that no strategy can run more than the plan."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from scipy import stats
from torch import nn

from planner.units import make_plan
from planner.units.silo_sample import SiloSamplePlan, SiloScenario
from trainer.data.silos import load_silo_data, mean_estimation
from trainer.engines.params import flatten_params, param_shapes, unflatten_params
from trainer.models import build_model
from trainer.strategies.base import RoundContext
from trainer.units.silo.dpsgd import DpSgdEngine, SiloMechanism, clipped_sum, per_example_gradients

torch.set_default_dtype(torch.float32)


def silo_plan(sizes: list[int], *, epsilon: float = 1.0, batch: int = 8, rounds: int = 3, steps: int | None = None,
              clip: float = 1.0, method: str = "mrmtl") -> SiloSamplePlan:
    scenario = SiloScenario.model_validate({
        "silos": [{"id": f"s{k}", "num_samples": n, "epsilon": epsilon} for k, n in enumerate(sizes)],
        "delta": 1e-5, "rounds": rounds, "batch_size": batch, "clip_norm": clip, "steps_per_round": steps,
    })
    plan = make_plan(scenario, method)
    assert isinstance(plan, SiloSamplePlan)
    return plan


def engine_for(plan: SiloSamplePlan, data: Any, model: nn.Module, **options: Any) -> DpSgdEngine:
    return DpSgdEngine(model, data.train, list(range(len(plan.silos))), SiloMechanism.from_plan(plan), **options)


def test_per_example_clipping_matches_a_loop() -> None:
    data = load_silo_data("rotated_digits", [30, 30, 30], seed=0)
    model = build_model("mlp", data.train, seed=0, hidden=[8])
    shapes = param_shapes(model)
    base = flatten_params(model)
    weights = base + 0.3 * torch.randn(3, base.numel(), generator=torch.Generator().manual_seed(1))
    rows = torch.stack([data.train.client_indices[k][:12] for k in range(3)])
    x, y = data.train.train_x[rows], data.train.train_y[rows]
    valid = torch.rand(3, 12, generator=torch.Generator().manual_seed(2)) < 0.7
    anchor = torch.zeros_like(weights)
    batched = clipped_sum(per_example_gradients(model, shapes)(weights, x, y, anchor, 0.0), valid, 0.5)
    for k in range(3):
        expected = torch.zeros(base.numel())
        for i in range(12):
            if not valid[k, i]:
                continue
            leaf = weights[k].clone().requires_grad_()
            out = torch.func.functional_call(model, unflatten_params(leaf, shapes), (x[k, i : i + 1],))
            (g,) = torch.autograd.grad(nn.functional.cross_entropy(out, y[k, i : i + 1]), leaf)
            expected += g * min(1.0, 0.5 / float(g.norm()))
        assert torch.allclose(batched[k], expected, atol=1e-6)


class ZeroGradient(nn.Module):
    """A regression model whose loss does not depend on its 200 parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(200))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :1] * 0.0 + (self.weight * 0.0).sum()


def test_noise_audit_zero_gradients() -> None:
    """With zero data gradients a pass moves each coordinate by lr * sum of steps of
    sigma_k c z / (q_k n_k): variance steps * (lr sigma_k c / (q_k n_k))^2 (chi-square 99.9%)."""
    sizes = [40, 80, 160]
    plan = silo_plan(sizes, epsilon=2.0, steps=3, rounds=20, clip=0.7)
    data = mean_estimation(sizes, seed=0)
    engine = engine_for(plan, data, ZeroGradient(), lr=0.3)
    start = torch.zeros(3, 200)
    draws = []
    for round_index in range(20):
        moved = engine.train(RoundContext(round_index, round_index, seed=5), start)
        draws.append(moved - start)
    updates = torch.stack(draws)  # [rounds, K, d]
    for k, silo in enumerate(plan.silos):
        std = 0.3 * silo.noise_multiplier * 0.7 / (silo.sampling_rate * silo.num_samples)
        values = updates[:, k].reshape(-1).double()
        statistic = float((values**2).sum()) / (3 * std**2)
        dof = values.numel()
        low, high = stats.chi2.ppf([0.0005, 0.9995], dof)
        assert low < statistic < high, (k, statistic / dof)


def test_poisson_masks_have_rate_q_and_nothing_sampled_is_dropped() -> None:
    sizes = [50, 200]
    plan = silo_plan(sizes, batch=10, steps=40, rounds=2)
    data = mean_estimation(sizes, seed=0)
    engine = engine_for(plan, data, build_model("mean", data.train, seed=0), lr=0.1)
    for k, silo in enumerate(plan.silos):
        counts = []
        for round_index in range(5):
            rows, valid, active = engine.sample(RoundContext(round_index, round_index, seed=3), pass_index=0)
            counts.append(int(valid[k].sum()))
            assert bool(active[k].all())
            for step in range(rows.shape[1]):  # the sampled rows are distinct rows of this silo
                chosen = rows[k, step][valid[k, step]]
                assert len(set(chosen.tolist())) == len(chosen)
                assert set(chosen.tolist()) <= set(data.train.client_indices[k].tolist())
        trials = 5 * 40 * silo.num_samples
        assert stats.binomtest(sum(counts), trials, silo.sampling_rate).pvalue > 1e-3
    # the pad is the largest sample: every valid flag fits, none is cut
    rows, valid, _ = engine.sample(RoundContext(0, 0, seed=3), pass_index=0)
    assert int(valid.sum(-1).max()) == rows.shape[-1]


def test_prox_outside_the_clip_is_not_clipped_and_inside_it_is() -> None:
    sizes = [30]
    plan = silo_plan(sizes, epsilon=1e3, batch=30, steps=1, rounds=1, clip=1e-3)
    data = mean_estimation(sizes, seed=0)
    model = build_model("mean", data.train, seed=0)
    start, anchor = torch.full((1, 1), 5.0), torch.zeros(1)
    outside = engine_for(plan, data, model, lr=0.1).train(RoundContext(0, 0, 1), start, anchor=anchor, prox=2.0)
    inside = engine_for(plan, data, model, lr=0.1, prox_inside_clip=True).train(
        RoundContext(0, 0, 1), start, anchor=anchor, prox=2.0)
    # outside: the prox step lr * lambda * (w - a) = 1.0 is taken in full; inside: clipped to ~ 1e-3
    assert float(start - outside) == pytest.approx(1.0, abs=0.01)
    assert abs(float(start - inside)) < 0.01


def test_a_pass_runs_once_per_round() -> None:
    plan = silo_plan([40, 40], method="ditto")
    data = mean_estimation([40, 40], seed=0)
    engine = engine_for(plan, data, build_model("mean", data.train, seed=0), lr=0.1)
    ctx = RoundContext(0, 0, 0)
    start = torch.zeros(2, 1)
    engine.train(ctx, start, pass_index=0)
    engine.train(ctx, start, pass_index=1)
    with pytest.raises(RuntimeError, match="twice"):
        engine.train(ctx, start, pass_index=1)
    with pytest.raises(Exception, match="pass"):
        engine.train(RoundContext(1, 1, 0), start, pass_index=2)
    engine.train(RoundContext(1, 1, 0), start, pass_index=0)


def test_the_engine_refuses_data_of_another_size() -> None:
    plan = silo_plan([40, 40])
    data = mean_estimation([40, 41], seed=0)
    with pytest.raises(Exception, match="examples"):
        engine_for(plan, data, build_model("mean", data.train, seed=0), lr=0.1)


def test_rotated_digits_silos_differ_by_rotation_group() -> None:
    data = load_silo_data("rotated_digits", [50] * 8, seed=0, test_samples=20)
    assert data.train.client_sizes() == [50] * 8
    assert [len(t) for t in data.test_indices] == [20] * 8
    x0, _ = data.train.client_data(0)
    assert tuple(x0.shape[1:]) == (1, 8, 8)
    assert np.isfinite(data.train.train_x.numpy()).all()
