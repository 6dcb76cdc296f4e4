"""``gdpfed bench discrete``: the discrete (Skellam) pipeline's per-round cost against the continuous one.

Per client, the work before secure aggregation: continuous = clip, Gaussian noise share,
randomised-rounding fixed-point encode (``trainer.secagg.encoding.encode``, the round
engine's path); discrete = clip, scale, randomised Hadamard rotation, conditional
rounding, Skellam share, mod 2^b (``trainer.secagg.discrete.client_share``). Per round on
the server: decode the modular sum (continuous) or decode, unrotate and rescale
(discrete). And the planner's calibration of one pool (``planner.discrete.calibrate_skellam``).
Table 3: the discrete mechanism's epsilon under the tight accountant (pld, the
dominating Gaussian of docs/accounting.md §11.7) against the continuous Gaussian's at equal
noise, at the planner's default grid and bit width.
Table 4: one aggregation round against TFF's DistributedDpSumFactory (``bench/discrete_tff.py``).
Medians of ``repeats`` runs on this machine's CPU; the masking itself (ChaCha20) is the
same for both and is measured by ``gdpfed bench secagg``.

Table 2, one pool's whole round through the round engine (``RoundEngine.run``, the real
SecAgg+ protocol on the plan's graph, the clients' updates given, not trained):
``--secagg-mechanism gaussian_continuous`` against ``skellam`` on the same plan and seed,
its stages (privatize: the clients' shares; secagg: the session and the server's decoding)
and their ratios, discrete over continuous. The two paths mask words of different widths
and lengths (continuous: d words of the fixed-point b; discrete: d' words of the block's b).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import accounting
from accounting.accountants import DEFAULT_ACCOUNTANT, AccountantName
from accounting.events import PoissonSampledGaussian, PoissonSampledSkellam
from accounting.events.poisson_sampled_skellam import gaussian_domination, unit_shift_table
from bench.discrete_tff import tff_rows
from planner.discrete import calibrate_skellam
from trainer.choices import SECAGG_MECHANISMS
from trainer.secagg import discrete as dm
from trainer.secagg.encoding import decode_sum, encode


def _median_ms(work: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def bench_pool(d: int, q: float = 0.01, rounds: int = 1000, accountant: AccountantName = DEFAULT_ACCOUNTANT) -> Any:
    """The bench's one pool: epsilon 3 at delta 1e-5, C = 1, t = 25 survivors of at most 300
    clients, calibrated by ``accountant``'s route (``planner.discrete.calibrate_skellam``)."""
    return calibrate_skellam(
        sampling_rate=q, rounds=rounds, epsilon=3.0, delta=1e-5, clip_norm=1.0, dimension=d,
        min_survivors=25, max_clients=300, accountant=accountant,
    )


def pipeline_rows(dimensions: list[int], repeats: int) -> list[dict[str, Any]]:
    rows = []
    for d in dimensions:
        rng = np.random.default_rng(d)
        update = rng.normal(size=d)
        mechanism = bench_pool(d)
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
                "calibration_ms": round(_median_ms(lambda: _cold(lambda: bench_pool(d)), 1), 1),
                "discretisation_overhead_%": round(100 * mechanism.discretisation_overhead, 3),
                "overhead_vs_continuous_%": round(100 * mechanism.overhead_vs_continuous, 2),
            }
        )
    return rows


ROUND_STAGES = ("privatize", "secagg", "aggregate")


def round_rows(settings: list[tuple[int, int]], rounds: int) -> list[dict[str, Any]]:
    """Per (d, expected clients): the median stage seconds of ``rounds`` rounds (after one
    warm-up) of each mechanism on one plan, and the discrete/continuous ratios."""
    import torch

    from planner import load_scenario, make_plan
    from trainer.strategies import Population, RoundContext
    from trainer.units.client.rounds import RoundEngine
    from trainer.units.client.strategies import PlanStrategy

    class GivenUpdates(PlanStrategy):
        """The plan's strategy whose clients send fixed random updates (no training: the stages timed follow it)."""

        def __init__(self, plan: Any, dim: int) -> None:
            no_model: Any = None  # never trained: client_update below replaces local training
            super().__init__(plan, no_model, None, engine="loop", local=None, device=torch.device("cpu"))
            self.updates = torch.from_numpy(np.random.default_rng(0).normal(size=(1, dim)) / np.sqrt(dim))

        def client_update(self, ctx: Any, global_params: Any, clients: Any, groups: Any) -> torch.Tensor:
            return self.updates.repeat(len(clients), 1)

    rows = []
    for d, expected in settings:
        scenario = {
            "groups": [{"id": "g", "epsilon": 3.0, "num_clients": 10 * expected}],
            "delta": 1e-5, "rounds": 1000, "clip_norm": 1.0, "model_dim": d, "expected_clients": expected,
            "min_clients_per_pool": 1, "secagg_mechanism": "skellam", "accountant": "rdp",
        }
        plan = make_plan(load_scenario(scenario))
        population = Population({"g": np.arange(10 * expected)})
        row: dict[str, Any] = {"d": d, "clients": expected}
        for mechanism in SECAGG_MECHANISMS:
            engine = RoundEngine(plan, GivenUpdates(plan, d), population, d, rounds=plan.rounds,
                                 secagg_mechanism=mechanism, secagg_workers=1)
            stages: dict[str, list[float]] = {stage: [] for stage in ROUND_STAGES}
            for round_index in range(rounds + 1):
                _, outcome = engine.run(RoundContext(round_index, round_index, seed=0), torch.zeros(d))
                if round_index:  # the first round is the warm-up
                    for stage in ROUND_STAGES:
                        stages[stage].append(outcome.timing[stage])
            short = "continuous" if mechanism == "gaussian_continuous" else "discrete"
            for stage in ROUND_STAGES:
                row[f"{short}_{stage}_s"] = round(statistics.median(stages[stage]), 3)
            row[f"{short}_graph"] = outcome.secagg.get(plan.pools[0].id, "aborted")
        for stage in ("privatize", "secagg"):
            row[f"{stage}_ratio"] = round(row[f"discrete_{stage}_s"] / max(row[f"continuous_{stage}_s"], 1e-9), 2)
        total = {short: sum(row[f"{short}_{stage}_s"] for stage in ROUND_STAGES) for short in ("continuous", "discrete")}
        row["round_ratio"] = round(total["discrete"] / max(total["continuous"], 1e-9), 2)
        rows.append(row)
    return rows


def _pld(events: list[Any], delta: float) -> float:
    return accounting.epsilon_of_events(events, delta=delta, accountant="pld").epsilon


def _cold(work: Callable[[], Any]) -> Any:
    """``work`` without the Skellam tables a previous call left in the cache (a new variance),
    nor the dominating Gaussians read off them."""
    unit_shift_table.cache_clear()
    gaussian_domination.cache_clear()
    return work()


def overhead_rows(dimensions: list[int], rates: list[tuple[float, int]]) -> list[dict[str, Any]]:
    """pld epsilon of the calibrated Skellam mechanism (its delta less the wrap-around share, at
    its bit width) against the continuous Gaussian at the same noise std: at sensitivity D2
    (the discretisation alone) and at C s (with conditional rounding's norm inflation); and the
    rdp route's (the calibration before the tight one, still that of non-pld plans)."""
    rows = []
    for d in dimensions:
        for q, rounds in rates:
            start = time.perf_counter()
            m = _cold(lambda: bench_pool(d, q, rounds))
            tight_ms = 1e3 * (time.perf_counter() - start)
            start = time.perf_counter()
            by_rdp = bench_pool(d, q, rounds, accountant="rdp")
            rdp_ms = 1e3 * (time.perf_counter() - start)
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
                    "calibration_ms": round(tight_ms, 1),
                    "rdp_route_sigma": round(by_rdp.equivalent_noise_multiplier, 4),
                    "rdp_route_vs_continuous_%": round(100 * by_rdp.overhead_vs_continuous, 1),
                    "rdp_route_ms": round(rdp_ms, 1),
                    "pld_ms": round(1e3 * seconds, 1),
                }
            )
    return rows


def run(quick: bool) -> list[tuple[str, list[dict[str, Any]]]]:
    dimensions = [1_000, 54_410] if quick else [1_000, 54_410, 1_000_000]
    settings = [(1_000, 30)] if quick else [(54_410, 100), (54_410, 300)]
    rates = [(0.01, 1000)] if quick else [(0.01, 1000), (0.05, 200), (0.22, 100)]
    tff_settings = [(10, 1_000)] if quick else [(10, 1_000), (10, 54_410), (100, 54_410)]
    return [
        (
            "Discrete (Skellam) vs continuous pipeline, per client and round",
            pipeline_rows(dimensions, 3 if quick else 15),
        ),
        (
            "One pool's round through the round engine and the real protocol (one process), continuous vs "
            "discrete (median seconds; ratios discrete / continuous; round = privatize + secagg + aggregate)",
            round_rows(settings, 1 if quick else 3),
        ),
        (
            "Discrete (Skellam) vs continuous epsilon at equal noise, tight accountant (pld), default grid and bit width",
            overhead_rows(dimensions, rates),
        ),
        (
            "One aggregation round, gdpfed's discrete pipeline vs TFF's DistributedDpSumFactory (distributed "
            "Skellam), no secure-aggregation crypto on either side (median seconds; TFF under GDPFED_TFF_PYTHON)",
            tff_rows(tff_settings, 1 if quick else 3),
        ),
    ]
