"""The privacy audit of one silo DP-SGD step (docs/secure-aggregation.md §Audit, docs/mrmtl.md §4).

Runs the real step of :class:`trainer.units.silo.dpsgd.DpSgdEngine` (Poisson masks, clipped
per-example gradients, Gaussian noise of std sigma c, division by the expected batch q n,
the parameter update), many times on two neighbouring datasets: with the target example,
or with it replaced by an example whose gradient is zero (the clipped sum is then that of
the dataset without it; the silo's size n, which the plan states, stays the same). The
other examples have zero gradients too. The engine runs ``batch`` copies of the silo as
its silos, each with its own masks and noise, so one pass gives ``batch`` runs. The score
is the update's coordinate along the target's gradient; ``noise_std_factor`` builds the
deliberately broken variant (noise multiplier times that factor in the engine).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

import accounting
from accounting.accountants import TIGHT_ACCOUNTANT
from accounting.audit import audit_summary
from planner.units import UNITS
from trainer.data.dataset import FederatedDataset
from trainer.strategies.base import RoundContext
from trainer.units.silo.dpsgd import DpSgdEngine, SiloMechanism


def _dataset(dimension: int, examples: int, target: bool) -> FederatedDataset:
    """A regression silo of ``examples`` rows at x = 0, y = 0 (zero gradient at any w of a
    bias-free linear model), the first row the target x = 10 e_0, y = -1 when ``target``."""
    x = torch.zeros(examples, dimension)
    y = torch.zeros(examples)
    if target:
        x[0, 0], y[0] = 10.0, -1.0
    return FederatedDataset(
        name="audit", task="regression", train_x=x, train_y=y, client_indices=(torch.arange(examples),),
        client_ids=("silo",), test_x=x[:1], test_y=y[:1], num_classes=1, input_shape=(dimension,),
    )


def scores(*, noise_multiplier: float, clip_norm: float, sampling_rate: float, examples: int, dimension: int,
           runs: int, seed: int, noise_std_factor: float = 1.0, batch: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """(scores without the target example, scores with it), ``runs`` each, one step per run."""
    out = []
    for present in (False, True):
        data = _dataset(dimension, examples, present)
        values: list[np.ndarray] = []
        for index, start in enumerate(range(0, runs, batch)):
            k = min(batch, runs - start)
            mechanism = SiloMechanism(
                sampling_rates=(sampling_rate,) * k, noise_multipliers=(noise_multiplier * noise_std_factor,) * k,
                clip_norm=clip_norm, steps_per_pass=(1,) * k, passes=1, num_samples=(examples,) * k,
            )
            model = nn.Linear(dimension, 1, bias=False)
            engine = DpSgdEngine(model, data, [0] * k, mechanism, lr=1.0)
            begin = torch.zeros(k, dimension)
            moved = engine.train(RoundContext(index, index, seed=seed), begin)
            # w <- w - g~: the target's gradient at w = 0 is (0 - y) x = +10 e_0, clipped to c e_0
            values.append((begin - moved)[:, 0].double().numpy())
        out.append(np.concatenate(values))
    return out[0], out[1]


def audit_silo(*, noise_multiplier: float = 1.0, clip_norm: float = 1.0, sampling_rate: float = 1.0,
               examples: int = 4, dimension: int = 4, delta: float = 1e-3, runs: int = 20_000, seed: int = 1,
               noise_std_factor: float = 1.0) -> dict[str, object]:
    """One audit of one DP-SGD step: the tight accountant's (pld) epsilon of (q, sigma, 1) against the lower bound."""

    accounted = accounting.epsilon(sampling_rate, noise_multiplier, 1, delta, accountant=TIGHT_ACCOUNTANT).epsilon
    without, with_ = scores(
        noise_multiplier=noise_multiplier, clip_norm=clip_norm, sampling_rate=sampling_rate, examples=examples,
        dimension=dimension, runs=runs, seed=seed, noise_std_factor=noise_std_factor,
    )
    return {
        "mechanism": "silo",
        "noise_multiplier": noise_multiplier,
        "clip_norm": clip_norm,
        "sampling_rate": sampling_rate,
        "examples": examples,
        "dimension": dimension,
        "noise_std_factor": noise_std_factor,
        **audit_summary(accounted, without, with_, delta, accountant=TIGHT_ACCOUNTANT, notion=UNITS["silo_sample"].label),
    }
