"""``gdpfed bench accounting``: calibration speed and agreement, gdpfed vs its peers.

Same inputs, one process, side by side:
- gdpfed ``noise_multiplier(accountant="rdp")`` vs Opacus ``get_noise_multiplier(accountant="rdp")``
  (Opacus at its default epsilon_tolerance=0.01 for the timing; the sigma difference is
  also given against Opacus run to a tight tolerance, 1e-4 x target, untimed);
- gdpfed ``noise_multiplier(accountant="prv")`` vs Opacus ``get_noise_multiplier(accountant="prv")``
  and ``prv_accountant.dpsgd.find_noise_multiplier``;
- the cost of the child-process fence around PRV, and the vectorised batch calibration;
- gdpfed ``noise_multiplier(accountant="pld")`` vs dp-accounting's PLD calibration on a fine
  grid (``calibrate_dp_mechanism`` with ``PLDAccountant(value_discretization_interval=1e-4)``),
  Opacus' PRV and RDP calibrations, prv_accountant and gdpfed rdp, each peer's time over pld's
  printed as ``x_vs_*``, and all cases in one lockstep ``noise_multipliers`` call against one
  call each (docs/benchmarks.md §Issue 26).
docs/benchmarks.md "## Accounting" holds a full run.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Any

import numpy as np

from bench.report import median, time_calls
from bench.startup import load_average

CASES: list[tuple[float, int, float, float]] = [  # (sampling_rate, rounds, epsilon, delta)
    (0.01, 1000, 1.0, 1e-5),
    (0.1, 100, 1.0, 1e-3),
    (0.05, 500, 3.61, 1e-4),
    (0.001, 2000, 0.5, 1e-6),
    (0.02, 300, 8.0, 1e-5),
    (1.0, 10, 4.0, 1e-5),
    (0.004, 5000, 2.0, 1e-5),
    (0.1, 1000, 10.0, 1e-5),
    (0.3, 50, 6.0, 1e-6),
    (0.005, 800, 0.8, 1e-5),
]


def run(quick: bool) -> list[tuple[str, list[dict[str, Any]]]]:
    warnings.filterwarnings("ignore")
    cases = CASES[:2] if quick else CASES
    repeats = 1 if quick else 15
    opacus_repeats = 1 if quick else 3

    rdp_rows = rdp_table(cases, repeats, opacus_repeats)

    prv_rows = []
    for q, t, eps, delta in cases:
        prv_rows.append(_prv_row(q, t, eps, delta, quick))

    load_before = load_average()
    pld_rows = pld_table(cases, repeats, prv_rows, rdp_rows)
    together_ms, alone_ms = lockstep_ms(cases, 1 if quick else 5)

    rdp_median_ms = median([r["gdpfed_ms"] for r in rdp_rows])
    summary = [
        {"metric": "gdpfed rdp calibration, median ms", "value": rdp_median_ms, "target": "< 5"},
        {"metric": "Opacus rdp calibration, median ms", "value": median([r["opacus_ms"] for r in rdp_rows]), "target": "-"},
        {"metric": "rdp speedup vs Opacus, ratio of medians x",
         "value": median([r["opacus_ms"] for r in rdp_rows]) / rdp_median_ms, "target": ">= 50"},
        {"metric": "rdp speedup vs Opacus, median of per-case ratios x",
         "value": median([r["speedup"] for r in rdp_rows]), "target": ">= 50"},
        {"metric": "rdp |sigma diff| vs Opacus (default tol), max %",
         "value": max(abs(r["diff_vs_opacus_%"]) for r in rdp_rows), "target": "-"},
        {"metric": "rdp |sigma diff| vs Opacus (tight tol), max %",
         "value": max(abs(r["diff_vs_opacus_tight_%"]) for r in rdp_rows), "target": "< 0.5"},
        {"metric": "gdpfed prv calibration, median s", "value": median([r["gdpfed_s"] for r in prv_rows]), "target": "< 2"},
        {"metric": "Opacus prv calibration, median s", "value": median([r["opacus_s"] for r in prv_rows]), "target": "-"},
        {"metric": "prv_accountant find_noise_multiplier, median s",
         "value": median([r["find_nm_s"] for r in prv_rows]), "target": "-"},
        {"metric": "PRV child-process fence overhead, median ms", "value": _fence_overhead_ms(quick), "target": "-"},
        {"metric": "batch rdp calibration, 1000 (q, eps) points, s", "value": _batch_seconds(quick), "target": "< 1"},
        {"metric": "gdpfed pld calibration, median ms", "value": median([r["pld_ms"] for r in pld_rows]), "target": "<= 25"},
        {"metric": "gdpfed pld calibration, worst ms", "value": max(r["pld_ms"] for r in pld_rows), "target": "<= 250"},
        {"metric": "gdpfed pld epsilon query, median ms",
         "value": median([r["pld_epsilon_ms"] for r in pld_rows]), "target": "<= 5"},
        {"metric": "pld speedup vs Opacus prv calibration, median x",
         "value": median([r["speedup_vs_opacus_prv"] for r in pld_rows]), "target": ">= 50"},
        {"metric": "pld speedup vs Opacus prv calibration, worst case x",
         "value": min(r["speedup_vs_opacus_prv"] for r in pld_rows), "target": ">= 50"},
        {"metric": "pld speedup vs Opacus prv calibration in CPU seconds, worst case x",
         "value": min(r["cpu_x_vs_opacus_prv"] for r in pld_rows), "target": ">= 50"},
        {"metric": "pld speedup vs dp-accounting PLD calibration, median x",
         "value": median([r["x_vs_dp_pld"] for r in pld_rows]), "target": "-"},
        {"metric": "pld speedup vs prv_accountant find_noise_multiplier, median x",
         "value": median([r["x_vs_prv_accountant"] for r in pld_rows]), "target": "-"},
        {"metric": "pld speedup vs Opacus rdp calibration, median x",
         "value": median([r["x_vs_opacus_rdp"] for r in pld_rows]), "target": "-"},
        {"metric": f"pld, all {len(cases)} cases in one noise_multipliers call (lockstep), ms",
         "value": together_ms, "target": "-"},
        {"metric": f"pld, the same {len(cases)} cases one call each, ms", "value": alone_ms, "target": "-"},
        {"metric": "pld |sigma diff| vs dp-accounting PLD (1e-4 grid), max %",
         "value": max(abs(r["diff_vs_dp_pld_%"]) for r in pld_rows), "target": "<= 0.5"},
    ]
    return [
        ("RDP calibration: gdpfed vs Opacus get_noise_multiplier(accountant='rdp')", rdp_rows),
        ("PRV calibration: gdpfed vs Opacus (prv) vs prv_accountant.dpsgd.find_noise_multiplier", prv_rows),
        (
            "PLD calibration: gdpfed pld vs dp-accounting PLD (1e-4 grid), Opacus prv and rdp, prv_accountant "
            f"(load average {load_before} before, {load_average()} after)",
            pld_rows,
        ),
        ("Accounting summary", summary),
    ]


def rdp_table(
    cases: list[tuple[float, int, float, float]], repeats: int, opacus_repeats: int
) -> list[dict[str, Any]]:
    """gdpfed rdp calibration vs Opacus' on the same inputs: times, sigmas, differences."""
    from opacus.accountants.utils import get_noise_multiplier

    import accounting

    rdp_rows = []
    for q, t, eps, delta in cases:
        ours = accounting.noise_multiplier(q, t, eps, delta).noise_multiplier
        our_s = time_calls(lambda: accounting.noise_multiplier(q, t, eps, delta), repeats)
        theirs = get_noise_multiplier(target_epsilon=eps, target_delta=delta, sample_rate=q, steps=t, accountant="rdp")
        their_s = time_calls(
            lambda: get_noise_multiplier(target_epsilon=eps, target_delta=delta, sample_rate=q, steps=t, accountant="rdp"),
            opacus_repeats,
            warmup=0,
        )
        tight = get_noise_multiplier(
            target_epsilon=eps, target_delta=delta, sample_rate=q, steps=t, accountant="rdp",
            epsilon_tolerance=1e-4 * eps,
        )
        rdp_rows.append(
            {
                "q": q, "T": t, "eps": eps, "delta": delta,
                "gdpfed_ms": 1e3 * median(our_s),
                "opacus_ms": 1e3 * median(their_s),
                "speedup": median(their_s) / median(our_s),
                "sigma_gdpfed": ours,
                "sigma_opacus": theirs,
                "diff_vs_opacus_%": 100 * (ours - theirs) / theirs,
                "diff_vs_opacus_tight_%": 100 * (ours - tight) / tight,
            }
        )
    return rdp_rows


def pld_table(
    cases: list[tuple[float, int, float, float]],
    repeats: int,
    prv_rows: list[dict[str, Any]],
    rdp_rows: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """gdpfed pld calibration and epsilon vs dp-accounting's PLD calibration on the same inputs;
    Opacus' prv and prv_accountant's times come from ``prv_rows`` and Opacus' rdp time from
    ``rdp_rows`` (same run; ``x_vs_*``: the peer's time over pld's), rdp's sigma is computed here."""
    import accounting

    rows = []
    for k, ((q, t, eps, delta), prv_row) in enumerate(zip(cases, prv_rows)):
        # every call is the whole search from its own start (pld keeps nothing between calls, §13.5)
        ours = _pld_fresh(q, t, eps, delta)
        our_s = time_calls(lambda: _pld_fresh(q, t, eps, delta), repeats)
        sigma = ours.noise_multiplier
        cpu_s = _cpu_calls(lambda: _pld_fresh(q, t, eps, delta), repeats)
        eps_s = time_calls(
            lambda: accounting.epsilon(q, sigma, t, delta, accountant="pld"), repeats
        )
        rdp_sigma = accounting.noise_multiplier(q, t, eps, delta).noise_multiplier
        dp_sigma, dp_s = _timed(lambda: _dp_pld_sigma(q, t, eps, delta, rdp_sigma))
        rows.append(
            {
                "q": q, "T": t, "eps": eps, "delta": delta,
                "pld_ms": 1e3 * median(our_s),
                "pld_epsilon_ms": 1e3 * median(eps_s),
                "dp_pld_s": dp_s,
                "opacus_prv_s": prv_row["opacus_s"],
                "speedup_vs_opacus_prv": prv_row["opacus_s"] / median(our_s),
                # the same ratio in CPU seconds: the two are timed minutes apart, and on a
                # shared machine the load in between moves wall time, not the work done
                "cpu_x_vs_opacus_prv": prv_row["opacus_cpu_s"] / median(cpu_s),
                "x_vs_dp_pld": dp_s / median(our_s),
                "x_vs_prv_accountant": prv_row["find_nm_s"] / median(our_s),
                "x_vs_opacus_rdp": None if rdp_rows is None else 1e-3 * rdp_rows[k]["opacus_ms"] / median(our_s),
                "sigma_pld": sigma,
                "sigma_dp_pld": dp_sigma,
                "diff_vs_dp_pld_%": _diff(sigma, dp_sigma),
                "sigma_opacus_prv": prv_row["sigma_opacus"],
                "sigma_rdp": rdp_sigma,
                "variance_rdp/pld": (rdp_sigma / sigma) ** 2,
            }
        )
    return rows


def _pld_fresh(q: float, t: int, eps: float, delta: float) -> Any:
    """pld's calibration of one question from its own start (pld keeps nothing between calls,
    docs/accounting.md §13.5, so every repeat times the whole search)."""
    import accounting

    return accounting.noise_multiplier(q, t, eps, delta, accountant="pld")


def _pld_fresh_many(cases: list[tuple[float, int, float, float]]) -> Any:
    """:func:`_pld_fresh` of every case, in one ``accounting.noise_multipliers`` call."""
    import accounting

    return accounting.noise_multipliers(cases, "pld")


def lockstep_ms(cases: list[tuple[float, int, float, float]], repeats: int) -> tuple[float, float]:
    """Median ms of every case calibrated by one ``accounting.noise_multipliers`` call (pld's
    lockstep searches, docs/accounting.md §13.7) and of the same cases one call each, timed
    alternately; the answers are checked equal."""
    together = _pld_fresh_many(cases)
    alone = [_pld_fresh(*case) for case in cases]
    if together != alone:
        raise RuntimeError("noise_multipliers differs from noise_multiplier one at a time")
    many, single = [], []
    for _ in range(repeats):
        many += time_calls(lambda: _pld_fresh_many(cases), 1, warmup=0)
        single += time_calls(lambda: [_pld_fresh(*case) for case in cases], 1, warmup=0)
    return 1e3 * median(many), 1e3 * median(single)


def _dp_pld_sigma(q: float, t: int, eps: float, delta: float, rdp_sigma: float) -> float:
    """dp-accounting's PLD calibration (connect-the-dots, pessimistic, interval 1e-4), to 1e-4 x
    the rdp sigma, searched in [rdp sigma / 2, rdp sigma] (a tight accountant needs no more noise
    than rdp; a bracket reaching tiny sigma makes every PLD evaluation slow)."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    return float(
        dp_accounting.calibrate_dp_mechanism(
            lambda: pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4),
            lambda s: dp_accounting.SelfComposedDpEvent(
                dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(s)), t
            ),
            eps,
            delta,
            dp_accounting.ExplicitBracketInterval(0.5 * rdp_sigma, rdp_sigma),
            tol=1e-4 * rdp_sigma,
        )
    )


def _prv_row(q: float, t: int, eps: float, delta: float, quick: bool) -> dict[str, Any]:
    from opacus.accountants.utils import get_noise_multiplier
    from prv_accountant.dpsgd import find_noise_multiplier

    import accounting

    result: dict[str, Any] = {}
    ours = time_calls(lambda: result.setdefault("ours", accounting.noise_multiplier(q, t, eps, delta, accountant="prv")), 1, warmup=0)
    calibration = result["ours"]
    clock = time.process_time()
    opacus_sigma, opacus_s = _timed(
        lambda: get_noise_multiplier(target_epsilon=eps, target_delta=delta, sample_rate=q, steps=t, accountant="prv")
    )
    opacus_cpu_s = time.process_time() - clock
    find_sigma, find_s = _timed(lambda: find_noise_multiplier(q, t, eps, delta))
    return {
        "q": q, "T": t, "eps": eps, "delta": delta,
        "gdpfed_s": ours[0],
        "opacus_s": opacus_s,
        "opacus_cpu_s": opacus_cpu_s,
        "find_nm_s": find_s,
        "sigma_gdpfed": calibration.noise_multiplier,
        "sigma_opacus": opacus_sigma,
        "sigma_find_nm": find_sigma,
        "diff_vs_opacus_%": _diff(calibration.noise_multiplier, opacus_sigma),
        "fallback": calibration.fallback,
    }


def _timed(fn: Any) -> tuple[float | None, float]:
    start = time.perf_counter()
    try:
        value = float(fn())
    except Exception:
        value = None
    return value, time.perf_counter() - start


def _cpu_calls(fn: Any, repeats: int) -> list[float]:
    """CPU seconds (``time.process_time``) of ``repeats`` calls of ``fn`` after one unmeasured."""
    fn()
    seconds = []
    for _ in range(repeats):
        clock = time.process_time()
        fn()
        seconds.append(time.process_time() - clock)
    return seconds


def _diff(ours: float, theirs: float | None) -> float | None:
    if theirs is None or not math.isfinite(theirs):
        return None
    return 100 * (ours - theirs) / theirs


def _fence_overhead_ms(quick: bool) -> float:
    from accounting import prv

    seconds = time_calls(lambda: prv.run_isolated(abs, (-1,), 10.0), 3 if quick else 20)
    return 1e3 * median(seconds)


def _batch_seconds(quick: bool) -> float:
    import accounting

    rates = np.logspace(-3, 0, 10 if quick else 50)[:, None]
    targets = np.logspace(-1, math.log10(16), 20)[None, :]
    seconds = time_calls(lambda: accounting.noise_multipliers_rdp(rates, 500, targets, 1e-5), 1 if quick else 3)
    return median(seconds)
