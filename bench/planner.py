"""``gdpfed bench planner``: the KKT water-filling against cvxpy, and full plan times.

Table 1 solves the same separable QP (docs/planning.md §4.1) with the exact KKT
water-filling and with cvxpy (CLARABEL) at 3, 100, 10,000 and 100,000 groups, and prints
both times, the speed-up and the objective gap. cvxpy at 100,000 groups is skipped (with
its estimate) when the 10,000-group time extrapolates past ``CVXPY_CAP_S``.
Table 2 times complete ``gdpfed_plus`` plans with rdp (tables, optimisation, exact
re-calibration, verification of every group, secure-aggregation thresholds) at 3, 100 and
1,000 groups, with the uniform-rate ``gdpfed`` plan on the same scenario for the ratio of J.
Table 3 (issue 26 §2) times ``make_plan`` with every prediction a plan carries: the plan
alone, with ``clients_needed`` derived from its design (today's default) and with the
previous re-planning search (``planner.plan.replanned_clients_needed``) in the same run,
their ratio and both sizes for the target 1 (docs/planning.md §13); ``with_derived_cold_s``
is the same plan with the noise-table cache emptied before each call (a first request).
Table 5 sets the issue's in-process targets beside this tree's warm, cold and CPU times and
the previous tree's, with their ratio: timed in the same run, by the same script in a fresh
interpreter per tree, where ``GDPFED_BENCH_BASELINE`` names a checkout of the previous tree,
else its recorded times (``PREVIOUS_PLAN_S``); 3 groups as the continuous plan of
``examples/scenario.json`` and with ``report_discrete``, the 1,000-group pld plan included.
``quick`` runs 3 and 100 groups only (tables 3 and 5: 3 groups).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from bench.report import median, time_calls

CVXPY_CAP_S = 120.0


def random_qp(n: int, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    a = rng.uniform(0, 5, n)
    b = rng.uniform(0.1, 50, n)
    w = rng.integers(1, 1000, n).astype(float)
    lo = rng.uniform(0, 0.05, n)
    hi = np.minimum(1.0, lo + rng.uniform(0.05, 1.0, n))
    total = float(w @ lo + 0.4 * (w @ (hi - lo)))
    return a, b, w, np.array(total), lo, hi


def _cvxpy_solve(a, b, w, total, lo, hi):
    import cvxpy as cp

    x = cp.Variable(len(a))
    problem = cp.Problem(
        cp.Minimize(a @ x + cp.sum(cp.multiply(b, cp.square(x)))), [w @ x == float(total), x >= lo, x <= hi]
    )
    problem.solve(solver=cp.CLARABEL)
    return np.asarray(x.value)


def kkt_vs_cvxpy(sizes: list[int]) -> list[dict[str, Any]]:
    from planner.waterfill import qp_objective, waterfill_qp

    rows = []
    previous: tuple[int, float] | None = None
    for n in sizes:
        a, b, w, total, lo, hi = random_qp(n, seed=n)
        repeats = 20 if n <= 10_000 else 5
        kkt_s = median(time_calls(lambda: waterfill_qp(a, b, w, float(total), lo, hi), repeats))
        x_kkt = waterfill_qp(a, b, w, float(total), lo, hi).x
        estimate = previous[1] * n / previous[0] * 1.5 if previous else 0.0
        if estimate > CVXPY_CAP_S:
            rows.append(
                {"groups": n, "kkt_ms": kkt_s * 1e3, "cvxpy_ms": f"skipped (est. {estimate:.0f} s)",
                 "speedup": "-", "objective_gap": "-"}
            )
            continue
        start = time.perf_counter()
        x_cvx = _cvxpy_solve(a, b, w, total, lo, hi)
        cvx_s = time.perf_counter() - start
        if n <= 100:
            cvx_s = median(time_calls(lambda: _cvxpy_solve(a, b, w, total, lo, hi), 5))
        previous = (n, cvx_s)
        ours, theirs = qp_objective(a, b, x_kkt), qp_objective(a, b, x_cvx)
        rows.append(
            {
                "groups": n,
                "kkt_ms": kkt_s * 1e3,
                "cvxpy_ms": cvx_s * 1e3,
                "speedup": f"{cvx_s / kkt_s:.0f}x",
                "objective_gap": (theirs - ours) / abs(ours),
            }
        )
    return rows


def big_scenario(n: int, seed: int = 0, accountant: str | None = None) -> Any:
    """n groups, log-uniform eps in [0.5, 8], 100-2000 clients, K = 5% of all clients; the
    scenario's default accountant unless ``accountant`` names one. The pools' noise is the
    continuous Gaussian, named: these tables time the planner's design and calibration, as
    recorded before the discrete blocks (issue 27; their cost is ``gdpfed bench discrete``'s)."""
    from planner.schema import Scenario

    rng = np.random.default_rng(seed)
    groups: list[dict[str, Any]] = [
        {"id": f"g{i}", "epsilon": float(np.exp(rng.uniform(np.log(0.5), np.log(8.0)))),
         "num_clients": int(rng.integers(100, 2000))}
        for i in range(n)
    ]
    total = sum(g["num_clients"] for g in groups)
    return Scenario.model_validate(
        dict(groups=groups, delta=1e-5, rounds=100, model_dim=100_000, expected_clients=0.05 * total,
             min_clients_per_pool=5, secagg_mechanism="gaussian_continuous",
             **({"accountant": accountant} if accountant else {}))
    )


def plan_times(sizes: list[int]) -> list[dict[str, Any]]:
    from planner.plan import make_plan

    targets = {3: 0.1, 100: None, 1000: 5.0}
    rows = []
    for n in sizes:
        scenario = big_scenario(n, accountant="rdp") if n > 3 else big_scenario(3, seed=3, accountant="rdp")
        repeats = 5 if n <= 3 else (3 if n <= 100 else 1)
        seconds = median(time_calls(lambda: make_plan(scenario, "gdpfed_plus", clients_needed=False), repeats, warmup=1 if n <= 100 else 0))
        plus = make_plan(scenario, "gdpfed_plus", clients_needed=False)
        uniform = make_plan(scenario, "gdpfed", clients_needed=False)
        target = targets.get(n)
        rows.append(
            {
                "groups": n,
                "plan_s": seconds,
                "target_s": target if target is not None else "-",
                "meets": ("yes" if seconds < target else "no") if target is not None else "-",
                "J_gdpfed_plus": plus.predicted.objective,
                "J_gdpfed_uniform": uniform.predicted.objective,
                "J_ratio": uniform.predicted.objective / plus.predicted.objective,
            }
        )
    return rows


# issue 26 §2: make_plan with every prediction, in-process
CLIENTS_NEEDED_TARGETS_S = {3: 0.02, 1000: 0.5}


def clients_needed_times(sizes: list[int], quick: bool, accountant: str = "rdp") -> list[dict[str, Any]]:
    """make_plan (gdpfed_plus, ``accountant``) alone, with the derived clients_needed and with
    the re-planning search it replaced, side by side (3 groups: examples/scenario.json)."""
    from pathlib import Path

    from planner.loading import load_scenario
    from planner.plan import make_plan, replanned_clients_needed

    rows = []
    for n in sizes:
        if n == 3:
            scenario = load_scenario(Path(__file__).resolve().parents[1] / "examples" / "scenario.json")
            scenario = scenario.model_copy(update={"accountant": accountant, "secagg_mechanism": "gaussian_continuous"})
        else:
            scenario = big_scenario(n, accountant=accountant)
        repeats = 1 if quick else (7 if n <= 3 else (3 if n <= 100 else 1))
        warmup = 1 if n <= 100 else 0
        alone = median(time_calls(lambda: make_plan(scenario, "gdpfed_plus", clients_needed=False), repeats, warmup=warmup))
        derived_s = median(time_calls(lambda: make_plan(scenario, "gdpfed_plus"), repeats, warmup=warmup))
        # the same plan without the noise table of the previous call (a new scenario, or a
        # fresh process): what a first request or the command line pays
        cold_s = median(time_calls(lambda: _cold(lambda: make_plan(scenario, "gdpfed_plus")), repeats, warmup=0))
        plan = make_plan(scenario, "gdpfed_plus")
        # the previous default: the same plan, then its re-planning search (about nine plans)
        searches = []
        for _ in range(1 if n > 3 or quick else 3):
            start = time.perf_counter()
            replanned = replanned_clients_needed(plan)
            searches.append(time.perf_counter() - start)
        replanned_s = alone + median(searches)
        target = CLIENTS_NEEDED_TARGETS_S.get(n)
        k_derived, k_replanned = plan.predicted.clients_needed[0].expected_clients, replanned[0].expected_clients
        rows.append(
            {
                "groups": n,
                "accountant": accountant,
                "plan_alone_s": alone,
                "with_derived_s": derived_s,
                "with_derived_cold_s": cold_s,
                "with_replanning_s": replanned_s,
                "speedup": f"{replanned_s / derived_s:.1f}x",
                "target_s": target if target is not None else "-",
                # a repeated question reuses its noise table: met only warm is said so
                "meets": (
                    ("yes" if cold_s <= target else "warm only" if derived_s <= target else "no")
                    if target is not None else "-"
                ),
                "K_rho1_derived": k_derived if k_derived is not None else "-",
                "K_rho1_replanned": k_replanned if k_replanned is not None else "-",
            }
        )
    return rows


# issue 26 §2's in-process targets, each beside the previous tree's time for the same call:
# (groups, accountant, report_discrete) -> (previous seconds, where it was measured): warm CPU
# seconds of the parent of the lattice search (99ba0bd), timed by this script beside it on the
# shared 2-core machine (docs/benchmarks.md "Issue 26 §2: pld's noise multiplier on a lattice").
# ``GDPFED_BENCH_BASELINE=<a checkout of the previous tree>`` times that tree instead, side by
# side in the same run (the same timing script, alternately).
PREVIOUS_PLAN_S: dict[tuple[int, str, bool], tuple[float, str]] = {
    (3, "rdp", False): (0.0229, "CPU s, 99ba0bd, load 4-6"),
    (3, "pld", False): (0.0421, "CPU s, 99ba0bd, load 4-6"),
    (3, "pld", True): (0.0835, "CPU s, 99ba0bd, load 4-6"),
    (100, "pld", False): (1.88, "CPU s, 99ba0bd, load 4-6"),
    (1000, "rdp", False): (3.06, "CPU s, 99ba0bd, load 4-6"),
    (1000, "pld", False): (15.9, "CPU s, 99ba0bd, load 4-6"),
}
PLAN_TARGETS_S = {3: 0.02, 1000: 0.5}

# Times make_plan (gdpfed_plus, every prediction) in a fresh interpreter on whichever tree is
# first on PYTHONPATH, so this tree and a previous one run the very same timing code. argv[1]:
# a JSON list of [groups, accountant, report_discrete, repeats]; prints one JSON row per case.
_TIMING_SCRIPT = """
import json, sys, time
from pathlib import Path
from statistics import median
from bench.planner import big_scenario
from planner.calibration import _cached_table
from planner.loading import load_scenario
from planner.plan import make_plan

root = Path(sys.argv[2])


def forget():
    # a first request: no noise table, and no stored pld answer to start a search from (only
    # the lattice search's trees up to 54be41d kept one)
    _cached_table.cache_clear()
    from accounting.accountants import pld
    getattr(pld, "_LAST_ANSWER", {}).clear()


for n, accountant, discrete, repeats in json.loads(sys.argv[1]):
    if n == 3:
        scenario = load_scenario(root / "examples" / "scenario.json")
        # the continuous path by name (skellam is the default); a previous tree without
        # secagg_mechanism reads report_discrete: true as the discrete blocks
        mechanism = {"secagg_mechanism": "skellam", "report_discrete": True} if discrete else {"secagg_mechanism": "gaussian_continuous"}
        scenario = scenario.model_copy(update={"accountant": accountant, **mechanism})
    else:
        scenario = big_scenario(n, accountant=accountant)
    warm, cold, cpu, cold_cpu = [], [], [], []
    if n < 1000:
        make_plan(scenario, "gdpfed_plus")
    for _ in range(repeats):
        forget()
        start, clock = time.perf_counter(), time.process_time()
        make_plan(scenario, "gdpfed_plus")
        cold.append(time.perf_counter() - start)
        cold_cpu.append(time.process_time() - clock)
        start, clock = time.perf_counter(), time.process_time()
        make_plan(scenario, "gdpfed_plus")
        warm.append(time.perf_counter() - start)
        cpu.append(time.process_time() - clock)
    print(json.dumps([median(warm), median(cold), median(cpu), median(cold_cpu), make_plan.__code__.co_filename]), flush=True)
"""


def _tree_times(tree: str, cases: list[tuple[int, str, bool, int]]) -> list[tuple[float, ...]]:
    """(warm, cold, warm CPU, cold CPU) median seconds of each case on ``tree`` (:data:`_TIMING_SCRIPT`)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    here = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": tree}
    # run in the tree itself: ``python -c`` puts the working directory first on sys.path, ahead
    # of PYTHONPATH, so a run started in this tree timed this tree's code for both
    done = subprocess.run(
        [sys.executable, "-c", _TIMING_SCRIPT, json.dumps(cases), here],
        env=env, capture_output=True, text=True, check=True, timeout=3600, cwd=tree,
    )
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("[")]
    for row in rows:  # the code timed is the tree's own
        if not row[-1].startswith(str(Path(tree).resolve())):
            raise RuntimeError(f"timed {row[-1]}, not {tree}'s code")
    return [tuple(row[:-1]) for row in rows]


def plan_targets(quick: bool) -> list[dict[str, Any]]:
    """make_plan (gdpfed_plus, every prediction) against issue 26 §2's targets: median wall
    seconds warm (the noise table reused: a repeated request; a tree of the lattice search
    up to 54be41d also reused pld's stored answers) and cold (emptied first) and CPU seconds of
    each, beside the previous tree's: timed in the same run where ``GDPFED_BENCH_BASELINE`` names its checkout, else the recorded
    ``PREVIOUS_PLAN_S``; ``x_faster``: previous over now (warm CPU, or as recorded),
    ``x_faster_cold``: the same of cold CPU (same run only). 3 groups: ``examples/scenario.json``, the
    continuous plan and with ``report_discrete``; more: ``big_scenario(n)``. The 1,000-group
    plans (seconds to tens of seconds each) run in the full suite only."""
    import os
    from pathlib import Path

    cases: list[tuple[int, str, bool]] = [(3, "rdp", False), (3, "pld", False), (3, "pld", True)]
    if not quick:
        cases += [(100, "pld", False), (1000, "rdp", False), (1000, "pld", False)]
    runs = [(n, accountant, discrete, 1 if quick or n >= 1000 else (9 if n <= 3 else 3)) for n, accountant, discrete in cases]
    here = str(Path(__file__).resolve().parents[1])
    baseline = os.environ.get("GDPFED_BENCH_BASELINE")
    now, before = [], []
    for run in runs:  # case by case, the two trees one after the other (load drifts)
        now += _tree_times(here, [run])
        if baseline:
            before += _tree_times(baseline, [run])
    rows = []
    for k, (n, accountant, discrete) in enumerate(cases):
        warm, cold, cpu, cold_cpu = now[k]
        previous: float | None
        cold_ratio: float | None = None
        if baseline:  # the ratio of CPU seconds: a shared machine's load moves wall time most
            previous = before[k][0]
            measured = (f"same run: warm {before[k][0]:.4g}, cold {before[k][1]:.4g}, CPU {before[k][2]:.4g}, "
                        f"cold CPU {before[k][3]:.4g} (ratio: CPU)")
            ratio: float | None = before[k][2] / cpu
            cold_ratio = before[k][3] / cold_cpu
        else:
            recorded = PREVIOUS_PLAN_S.get((n, accountant, discrete))
            previous = recorded[0] if recorded else None
            measured = recorded[1] if recorded else "-"
            ratio = (previous / (cpu if "CPU" in measured else warm)) if previous else None
        target = PLAN_TARGETS_S.get(n)
        rows.append({
            "groups": n,
            "accountant": accountant + (" +discrete" if discrete else ""),
            "warm_s": warm,
            "cold_s": cold,
            "cpu_s": cpu,
            "cold_cpu_s": cold_cpu,
            "previous_s": previous if previous is not None else "-",
            "previous_measured": measured,
            "x_faster": f"{ratio:.2f}x" if ratio else "-",
            "x_faster_cold": f"{cold_ratio:.2f}x" if cold_ratio else "-",
            "target_s": target if target is not None else "-",
            "meets": (("yes" if cold <= target else "warm only" if warm <= target else "no")
                      if target is not None else "-"),
        })
    return rows


def target_floors(quick: bool) -> list[dict[str, Any]]:
    """Issue 26 §2: what of each target the issue's other clauses alone take (CPU seconds).

    Beside the whole default (pld) plan, two parts every such plan must do: ``certify``,
    pld's calibration of each noisy group's noise multiplier started on its own answer
    (``starts``: an oracle start, the two lattice evaluations that certify a point,
    docs/accounting.md §13.5), and ``tight_figures``, pld's epsilon of each group's history
    (the tight figure every plan states, docs/ledger.md §3). 3 groups: the default plan of
    ``examples/scenario.json`` (pld, skellam); 1,000: ``big_scenario(1000)`` (pld, continuous,
    full suite only). ``floor_s`` is their sum: a lower bound on the plan, whatever the rest costs.
    Beside them the same scenario planned the way the targets were set (rdp, continuous noise):
    its 1,000-group plan also states every group's tight figure. Plans are cold (noise table emptied).
    """
    from pathlib import Path

    from accounting.accountants.pld import PldAccountant
    from accounting.events import ApproximateDpEvent
    from planner.ledger import group_history
    from planner.loading import load_scenario
    from planner.plan import make_plan

    cases = [("examples/scenario.json (pld, skellam)", 3)] + ([] if quick else [("big_scenario(1000) (pld)", 1000)])
    rows = []
    for name, n in cases:
        if n == 3:
            scenario = load_scenario(Path(__file__).resolve().parents[1] / "examples" / "scenario.json")
        else:
            scenario = big_scenario(n)
        repeats = 1 if n > 3 else 5
        plan_cpu = median([_cpu(lambda: _cold(lambda: make_plan(scenario, "gdpfed_plus"))) for _ in range(repeats)])
        # the route the target was set on (rdp, continuous noise: the default before issues 26 and 27)
        rdp_scenario = scenario.model_copy(update={"accountant": "rdp", "secagg_mechanism": "gaussian_continuous"})
        rdp_cpu = median([_cpu(lambda: _cold(lambda: make_plan(rdp_scenario, "gdpfed_plus"))) for _ in range(repeats)])
        plan = make_plan(scenario, "gdpfed_plus")
        noisy = [g for g in plan.groups if g.noise_multiplier_required is not None and g.epsilon is not None]
        questions: list[tuple[float, int, float, list[ApproximateDpEvent]]] = [
            (g.sampling_rate, plan.rounds, float(g.epsilon), []) for g in noisy  # type: ignore[arg-type]
        ]
        answers = [g.noise_multiplier_required for g in noisy]
        histories: list[list[ApproximateDpEvent]] = [list(group_history(plan, g, plan.rounds)) for g in plan.groups]
        histories = [h for h in histories if h]
        pld = PldAccountant()
        certify = median([_cpu(lambda: pld.noise_multipliers(questions, scenario.delta, starts=answers)) for _ in range(repeats)])
        figures = median([_cpu(lambda: pld.epsilons(histories, scenario.delta)) for _ in range(repeats)])
        target = PLAN_TARGETS_S[n]
        rows.append({
            "plan": name,
            "groups": n,
            "default_plan_cpu_s": plan_cpu,
            "rdp_continuous_plan_cpu_s": rdp_cpu,
            "certify_s": certify,
            "tight_figures_s": figures,
            "floor_s": certify + figures,
            "target_s": target,
            "floor_over_target": f"{(certify + figures) / target:.2f}x",
        })
    return rows


def _cpu(call: Any) -> float:
    start = time.process_time()
    call()
    return time.process_time() - start


def _cold(call: Any) -> Any:
    """``call()`` with planner.calibration's noise-table cache emptied first (pld keeps no
    answers between calls, docs/accounting.md §13.5)."""
    from planner.calibration import _cached_table

    _cached_table.cache_clear()
    return call()


def run(quick: bool) -> list[tuple[str, list[dict[str, Any]]]]:
    qp_sizes = [3, 100] if quick else [3, 100, 10_000, 100_000]
    plan_sizes = [3, 100] if quick else [3, 100, 1000]
    needed_sizes = [3] if quick else [3, 100, 1000]
    return [
        ("KKT water-filling vs cvxpy (CLARABEL), same QP", kkt_vs_cvxpy(qp_sizes)),
        ("gdpfed_plus plans with rdp (J ratio: uniform-rate gdpfed / gdpfed_plus)", plan_times(plan_sizes)),
        (
            "make_plan gdpfed_plus (rdp) with clients_needed: derived from the plan vs re-planning search "
            "(issue 26; seconds, same run)",
            clients_needed_times(needed_sizes, quick),
        ),
        (
            "make_plan gdpfed_plus under the default accountant (pld, since issue 26) with clients_needed "
            "(seconds, same run)",
            clients_needed_times([3] if quick else [3, 100], quick, accountant="pld"),
        ),
        (
            "issue 26 §2 targets: make_plan gdpfed_plus with every prediction, beside the previous tree's time",
            plan_targets(quick),
        ),
        (
            "issue 26 §2: the floor under each target, the parts the issue's other clauses require "
            "(pld certification from an oracle start + the tight figures; CPU seconds)",
            target_floors(quick),
        ),
    ]
