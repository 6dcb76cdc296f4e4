"""``gdpfed bench discrete``: the discrete (Skellam) pipeline's per-round cost against the continuous one.

Per client, the work before secure aggregation: continuous = clip, Gaussian noise share,
randomised-rounding fixed-point encode (``trainer.secagg.encoding.encode``, the round
engine's path); discrete = clip, scale, randomised Hadamard rotation, conditional
rounding, Skellam share, mod 2^b (``trainer.secagg.discrete.client_share``). Per round on
the server: decode the modular sum (continuous) or decode, unrotate and rescale
(discrete). And the planner's calibration of one pool (``planner.discrete.calibrate_skellam``).
A second table: the discrete mechanism's epsilon under the tight accountant (pld, the
dominating Gaussian of docs/accounting.md §11.7) against the continuous Gaussian's at equal
noise, at the planner's default grid and bit width.
Medians of ``repeats`` runs on this machine's CPU; the masking itself (ChaCha20) is the
same for both and is measured by ``gdpfed bench secagg``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import accounting
from accounting.events import PoissonSampledGaussian, PoissonSampledSkellam
from planner.discrete import calibrate_skellam
from trainer.secagg import discrete as dm
from trainer.secagg.encoding import decode_sum, encode


def _median_ms(work: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def pipeline_rows(dimensions: list[int], repeats: int) -> list[dict[str, Any]]:
    rows = []
    for d in dimensions:
        rng = np.random.default_rng(d)
        update = rng.normal(size=d)
        mechanism = calibrate_skellam(
            sampling_rate=0.01,
            rounds=1000,
            epsilon=3.0,
            delta=1e-5,
            clip_norm=1.0,
            dimension=d,
            min_survivors=25,
            max_clients=300,
        )
        params = dm.DiscreteParams.from_mechanism(mechanism)
        signs = dm.rotation_signs(1, d)
        sigma_share = mechanism.equivalent_noise_multiplier / np.sqrt(25)
        bound = 1.0 + 7 * sigma_share

        def continuous_client() -> np.ndarray:
            clipped = dm.clip(update, 1.0)
            noised = np.clip(clipped + rng.normal(0.0, sigma_share, size=d), -bound, bound)
            return encode(noised, scale=2.0**22, modulus_bits=32, value_bound=bound, rng=rng)

        def discrete_client() -> np.ndarray:
            return dm.client_share(update, params, signs, rng)

        words = continuous_client()
        shares = discrete_client()
        rows.append(
            {
                "d": d,
                "d_padded": params.padded_dimension,
                "bits": params.bits,
                "continuous_client_ms": round(_median_ms(continuous_client, repeats), 2),
                "discrete_client_ms": round(_median_ms(discrete_client, repeats), 2),
                "continuous_decode_ms": round(
                    _median_ms(lambda: decode_sum(words, scale=2.0**22, modulus_bits=32), repeats), 2
                ),
                "discrete_decode_ms": round(_median_ms(lambda: dm.server_decode(shares, params, signs), repeats), 2),
                "calibration_ms": round(
                    _median_ms(
                        lambda: calibrate_skellam(
                            sampling_rate=0.01,
                            rounds=1000,
                            epsilon=3.0,
                            delta=1e-5,
                            clip_norm=1.0,
                            dimension=d,
                            min_survivors=25,
                            max_clients=300,
                        ),
                        1,
                    ),
                    1,
                ),
                "discretisation_overhead_%": round(100 * mechanism.discretisation_overhead, 3),
                "overhead_vs_continuous_%": round(100 * mechanism.overhead_vs_continuous, 1),
            }
        )
    return rows


def _pld(events: list[Any], delta: float) -> float:
    return accounting.epsilon_of_events(events, delta=delta, accountant="pld").epsilon


def overhead_rows(dimensions: list[int], rates: list[tuple[float, int]]) -> list[dict[str, Any]]:
    """pld epsilon of the calibrated Skellam mechanism (its delta less the wrap-around share, at
    its bit width) against the continuous Gaussian at the same noise std: at sensitivity D2
    (the discretisation alone) and at C s (with conditional rounding's norm inflation)."""
    rows = []
    for d in dimensions:
        for q, rounds in rates:
            mechanism = calibrate_skellam(
                sampling_rate=q, rounds=rounds, epsilon=3.0, delta=1e-5, clip_norm=1.0, dimension=d,
                min_survivors=25, max_clients=300,
            )
            m = mechanism
            start = time.perf_counter()
            skellam = _pld(
                [PoissonSampledSkellam(sampling_rate=q, variance=m.total_variance, l2_sensitivity=m.l2_sensitivity,
                                       l1_sensitivity=m.l1_sensitivity, steps=rounds)],
                m.delta - m.wrap_probability_run,
            )
            seconds = time.perf_counter() - start
            equal_d2 = _pld(
                [PoissonSampledGaussian(sampling_rate=q, noise_multiplier=m.total_variance**0.5 / m.l2_sensitivity,
                                        steps=rounds)],
                m.delta,
            )
            continuous = _pld(
                [PoissonSampledGaussian(sampling_rate=q, noise_multiplier=m.equivalent_noise_multiplier, steps=rounds)],
                m.delta,
            )
            rows.append(
                {
                    "d": d,
                    "q": q,
                    "T": rounds,
                    "b": m.bits,
                    "sigma": round(m.equivalent_noise_multiplier, 4),
                    "(D2/Cs)^2-1_%": round(100 * ((m.l2_sensitivity / (m.clip_norm * m.scale)) ** 2 - 1), 3),
                    "eps_skellam_pld": round(skellam, 5),
                    "eps_gauss_pld": round(continuous, 5),
                    "vs_gauss_same_D2_%": round(100 * (skellam / equal_d2 - 1), 5),
                    "vs_continuous_%": round(100 * (skellam / continuous - 1), 3),
                    "vs_continuous_rdp_%": round(100 * m.overhead_vs_continuous, 1),
                    "pld_ms": round(1e3 * seconds, 1),
                }
            )
    return rows


def run(quick: bool) -> list[tuple[str, list[dict[str, Any]]]]:
    dimensions = [1_000, 54_410] if quick else [1_000, 54_410, 1_000_000]
    rates = [(0.01, 1000)] if quick else [(0.01, 1000), (0.05, 200), (0.22, 100)]
    return [
        (
            "Discrete (Skellam) vs continuous pipeline, per client and round",
            pipeline_rows(dimensions, 3 if quick else 15),
        ),
        (
            "Discrete (Skellam) vs continuous epsilon at equal noise, tight accountant (pld), default grid and bit width",
            overhead_rows(dimensions, rates),
        ),
    ]
