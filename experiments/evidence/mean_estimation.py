"""MR-MTL's engine and strategy against the mean-estimation closed forms (issue 30, docs/results.md §8.1).

The paper's section-6 toy (docs/mrmtl.md §3): K silos of n points ``x = w_k + N(0, sigma^2)``,
``w_k ~ N(0, tau^2)``. Each cell trains the real trainer (``prepare_run`` / ``execute_run``:
the silo planner's sigma_k, the DP-SGD engine, the ``mrmtl`` / ``local`` / ``fedavg``
strategy, the ledger) with the ``mean`` model at sampling rate 1 (batch n), a clip norm five
data standard deviations out (almost never reached), and reads the final evaluated models from the run's checkpoint; its error
is ``mean_k (w_k^T - w_k)^2`` against the silos' true means. The prediction is
``planner.mean_estimation.iterated_error`` (exact for that algorithm, docs/mrmtl.md §3.4);
Lemma 6.7's E(lambda) of the one-shot estimator is printed next to it.

    python experiments/evidence/mean_estimation.py --out DIR [--seeds 0 1 ...] [--lambdas ...]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

# the design note's anchor (docs/mrmtl.md §3.2) with K and n chosen so one run averages many silos
DATA_STD, TASK_STD = 0.4, 0.08
CLIP = 2.0  # the gradient w - x of the engine's (w - x)^2 / 2 reaches 2 only 5 data stds from the silo's mean


def toy_data(num_silos: int, num_samples: int, seed: int) -> tuple[Any, np.ndarray]:
    """The toy as silo data (one test point per silo: evaluation is not what is measured)
    and the silos' true means ``w_k``."""
    from trainer.data.silos import _package

    rng = np.random.default_rng([seed, 30])
    tasks = rng.normal(0.0, TASK_STD, size=num_silos)
    train, test = [], []
    for k in range(num_silos):
        points = (tasks[k] + rng.normal(0.0, DATA_STD, size=num_samples)).astype(np.float32)
        train.append((points[:, None], points))
        test.append((points[:1, None], points[:1]))
    return _package("mean_estimation", "regression", train, test, 1), tasks


def train(method: str, prox: float, *, num_silos: int, num_samples: int, epsilon: float, rounds: int,
          local_epochs: int, lr: float, seed: int, out: Path) -> dict[str, Any]:
    """One trainer run: the plan's sigma_k, every silo's final evaluated model, true mean
    and data mean, and the squared errors."""
    import torch

    from planner.units import make_plan
    from planner.units.silo_sample import SiloSamplePlan, SiloScenario
    from trainer.experiments.cell import Discard
    from trainer.run.checkpoint import load_checkpoint
    from trainer.run.progress import Progress
    from trainer.runner import TrainConfig, execute_run, prepare_run
    from trainer.units.silo.strategies import SiloStrategy

    torch.set_num_threads(1)
    scenario = SiloScenario.model_validate(dict(
        privacy_unit="silo_sample", delta=1e-5, rounds=rounds, batch_size=num_samples, clip_norm=CLIP,
        local_epochs=local_epochs,
        silos=[dict(id=f"s{k:03d}", num_samples=num_samples, epsilon=epsilon) for k in range(num_silos)],
    ))
    plan = make_plan(scenario, "fedavg" if method == "fedavg" else ("local" if method == "local" else "mrmtl"))
    assert isinstance(plan, SiloSamplePlan)
    data, tasks = toy_data(num_silos, num_samples, seed)
    options = {"prox": prox} if method == "mrmtl" else {}
    config = TrainConfig(dataset="mean_estimation", model="mean", rounds=rounds, seed=seed, lr=lr,
                         eval_every=rounds, checkpoint_every=rounds, strategy="plan", strategy_options=options)
    run_dir = out / f"{method}-{prox:g}-s{seed}"
    prepared = prepare_run(plan, plan.model_dump(mode="json"), config, run_dir, device="cpu", dataset=data)
    execute_run(prepared, progress=Progress(rounds, 0, stream=Discard(), use_bar=False))
    state = load_checkpoint(run_dir / "checkpoint.pt")
    strategy = prepared.strategy
    assert isinstance(strategy, SiloStrategy)
    final = strategy.evaluated_models(state["global_params"]).detach().reshape(num_silos).double().numpy()
    means = np.array([float(data.train.train_x[rows].double().mean()) for rows in data.train.client_indices])
    return dict(sigma=plan.silos[0].noise_multiplier, models=final, tasks=tasks, data_means=means,
                errors=(final - tasks) ** 2)


def predicted(method: str, prox: float, sigma: float, **sizes: Any) -> float:
    """``iterated_error`` for the run's sizes and planned sigma_k."""
    from planner.mean_estimation import iterated_error

    return iterated_error(num_silos=sizes["num_silos"], num_samples=sizes["num_samples"], data_std=DATA_STD,
                          task_std=TASK_STD, step_noise_std=sigma * CLIP, prox=prox if method == "mrmtl" else 0.0,
                          lr=sizes["lr"], rounds=sizes["rounds"], steps_per_round=sizes["local_epochs"],
                          method="fedavg" if method == "fedavg" else "mrmtl")


def main(argv: list[str] | None = None) -> int:
    from scipy.stats import t as t_dist

    from planner.mean_estimation import expected_error, local_variance

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--lambdas", type=float, nargs="+", default=[0.25, 0.5, 1.0, 2.0, 4.0, 8.0])
    parser.add_argument("--silos", type=int, default=100)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--local-epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=None,
                        help="one step size for every arm (default: 1 / (1 + lambda), the step at which one "
                        "DP-SGD step lands on the minimiser of the round's objective, so the algorithm has "
                        "Lemma 6.1's form; 1 for local and FedAvg)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    base = dict(num_silos=args.silos, num_samples=args.samples, rounds=args.rounds, local_epochs=args.local_epochs)
    arms = [("local", 0.0), ("fedavg", 0.0)] + [("mrmtl", lam) for lam in args.lambdas]
    rows = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        for method, prox in arms:
            lr = args.lr if args.lr is not None else 1.0 / (1.0 + prox)
            sizes = dict(base, lr=lr)
            errors, sigma = [], math.nan
            for seed in args.seeds:
                result = train(method, prox, epsilon=args.epsilon, seed=seed, out=Path(scratch), **sizes)
                errors.append(result["errors"])
                sigma = result["sigma"]
            # one number per run (the silos of a run share the mean's noise), CI over runs
            per_run = [float(e.mean()) for e in errors]
            mean = statistics.fmean(per_run)
            # Student's t over runs (few of them)
            quantile = float(t_dist.ppf(0.975, len(per_run) - 1)) if len(per_run) > 1 else math.nan
            half = quantile * statistics.stdev(per_run) / math.sqrt(len(per_run)) if len(per_run) > 1 else math.nan
            exact = predicted(method, prox, sigma, **sizes)
            # Lemma 6.7 for the one-shot estimator with one release's noise sigma_DP = sigma_k c
            local_var = local_variance(DATA_STD**2, args.samples, sigma * CLIP)
            paper_prox = {"local": 0.0, "fedavg": 1e12}.get(method, prox)
            lemma = expected_error(args.silos, local_var, TASK_STD**2, paper_prox)
            rows.append(dict(method=method, prox=prox, lr=lr, sigma=sigma, runs=len(per_run), measured=mean, ci95=half,
                             exact=exact, t=(mean - exact) / (half / quantile) if half else math.nan, lemma_6_7=lemma))
            print(json.dumps(rows[-1]), flush=True)
    lines = [f"K = {args.silos} silos, n = {args.samples}, sigma = {DATA_STD}, tau = {TASK_STD}, epsilon {args.epsilon} "
             f"per silo (delta 1e-5), T = {args.rounds} rounds x {args.local_epochs} step(s) at q = 1, "
             f"lr {args.lr if args.lr is not None else '1 / (1 + lambda)'}, "
             f"clip {CLIP}, seeds {args.seeds}; {time.perf_counter() - started:.0f} s", "",
             "| method | lambda | lr | sigma_k | measured error (95% CI over runs) | exact, iterated | t | Lemma 6.7 (one-shot, same sigma_DP) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['method']} | {r['prox']:g} | {r['lr']:.3g} | {r['sigma']:.3f} | {r['measured']:.3e} ± {r['ci95']:.1e} | "
                     f"{r['exact']:.3e} | {r['t']:+.2f} | {r['lemma_6_7']:.3e} |")
    (args.out / "mean_estimation.md").write_text("\n".join(lines) + "\n")
    (args.out / "mean_estimation.json").write_text(json.dumps(rows, indent=1))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
