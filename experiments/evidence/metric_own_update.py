"""Why the metric paper's own_update radius diverges on its synthetic task (issue 30, docs/results.md §10.4).

The paper's setting of experiments/metric.yaml (k = 2 hypotheses from N(0, 1), nu = 5,
U = 7 of 100 users a round, one local step of batch 10 at step 0.1, 100 rounds, n = 2),
trained with the real trainer (``prepare_run`` / ``execute_run``: the metric_local plan,
the Laplace mechanism, ``metric_ifca``). The strategy's two hooks are wrapped here, not
changed, to record what the server never sees (each client's update size and its noise's
size) and what it does (the released vectors, the k-means result):

- the size of the first releases: the update norm ``||delta||`` (the own_update radius),
  the noise norm ``||rho||`` and the release's distance to the nearest true parameter
  ``theta*`` in the first rounds, for own_update and for the public radius r = 0.05;
- cluster capture: the round from which a hypothesis is nobody's best (no user of the
  population picks it, so no client ever trains from it again) and how far it then is
  from both ``theta*``;
- the paper's early stopping: 30 validation users (a second draw of the same two
  populations, seed + 1000) score the hypotheses after every round (each user with its
  best hypothesis on its training rows, RMSE on its held-out rows); training stops after
  ``--patience`` rounds (6, the paper's) without a new best, and the hypotheses of the
  best validation round are the result. Stopping only cuts the run: rounds before the
  stop are the same draws, so it is evaluated on the one full run, and the leakage is
  counted up to the stop.

    python experiments/evidence/metric_own_update.py --out DIR [--seeds 0 1 ...]
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

THETA = np.array([[5.0, 6.0], [4.0, -4.5]])  # the task's two populations (docs/metric-privacy.md §6)
ROUNDS, USERS, PER_ROUND, NU = 100, 100, 7, 5.0


def run(rule: str, seed: int, *, out: Path, patience: int, validation_users: int = 30) -> dict[str, Any]:
    """One full run with its per-round record; early stopping evaluated on it."""
    import torch

    from planner.units import make_plan
    from planner.units.metric_local import MetricPlan, MetricScenario
    from trainer.data import load_dataset
    from trainer.experiments.cell import Discard
    from trainer.run.progress import Progress
    from trainer.runner import TrainConfig, execute_run, prepare_run

    torch.set_num_threads(1)
    scenario = MetricScenario.model_validate(dict(
        privacy_unit="metric_local", groups=[dict(id="all", num_clients=USERS, noise_multiplier=NU)], rounds=ROUNDS,
        clients_per_round=PER_ROUND, hypotheses=2, model_dim=2, radius_rule=rule,
        radius=None if rule == "own_update" else 0.05,
    ))
    plan = make_plan(scenario, "metric_laplace")
    assert isinstance(plan, MetricPlan)
    config = TrainConfig(dataset="metric_synthetic", model="mlp", model_options={"hidden": [], "bias": False},
                         rounds=ROUNDS, seed=seed, partition="natural", local_steps=1, batch_size=10, lr=0.1,
                         eval_every=ROUNDS, checkpoint_every=ROUNDS, strategy="metric_ifca")
    data = load_dataset("metric_synthetic", num_clients=USERS, partition="natural", seed=seed)
    validation = load_dataset("metric_synthetic", num_clients=validation_users, partition="natural", seed=seed + 1000)
    prepared = prepare_run(plan, plan.model_dump(mode="json"), config, out / f"{rule}-s{seed}", device="cpu", dataset=data)
    strategy: Any = prepared.strategy
    rounds: list[dict[str, Any]] = []
    release, aggregate = strategy.client_release, strategy.aggregate_released

    def client_release(ctx: Any, global_params: Any, clients: Any, groups: Any) -> Any:
        result = release(ctx, global_params, clients, groups)
        rounds.append(dict(round=ctx.global_round, trained=result.trained.detach().double().numpy().copy(),
                           base=result.base.detach().double().numpy().copy()))
        return result

    def aggregate_released(ctx: Any, global_params: Any, released: Any) -> Any:
        new = aggregate(ctx, global_params, released)
        record = rounds[-1]
        record["released"] = released.detach().double().numpy().copy()
        record["hypotheses"] = strategy.hypotheses(new).detach().double().numpy().copy()
        # who picks which hypothesis now (the whole training population), and validation
        record["chosen"] = np.bincount([strategy.choose(strategy.hypotheses(new), c) for c in range(USERS)],
                                       minlength=2).tolist()
        record["validation_rmse"] = strategy.evaluate(ctx, new, validation)["personal_rmse"]
        record["test_rmse"] = strategy.evaluate(ctx, new, data)["personal_rmse"]
        return new

    strategy.client_release, strategy.aggregate_released = client_release, aggregate_released
    summary = execute_run(prepared, progress=Progress(ROUNDS, 0, stream=Discard(), use_bar=False))

    first = [r for r in rounds if r["round"] < 3]
    update = np.concatenate([np.linalg.norm(r["trained"] - r["base"], axis=1) for r in first])
    noise = np.concatenate([np.linalg.norm(r["released"] - r["trained"], axis=1) for r in first])
    distance = np.concatenate([np.linalg.norm(r["released"][:, None] - THETA[None], axis=2).min(axis=1) for r in first])
    dead = next((r["round"] for r in rounds if min(r["chosen"]) == 0 and all(
        min(s["chosen"]) == 0 for s in rounds if s["round"] >= r["round"])), None)
    final = rounds[-1]["hypotheses"]
    # early stopping (the paper's): stop after `patience` rounds without a new best validation RMSE
    best, best_round, stop = math.inf, 0, ROUNDS - 1
    for r in rounds:
        if r["validation_rmse"] < best:
            best, best_round = r["validation_rmse"], r["round"]
        elif r["round"] - best_round >= patience:
            stop = r["round"]
            break
    participations = sum(len(r["trained"]) for r in rounds if r["round"] <= stop)
    return dict(
        rule=rule, seed=seed, final_test_rmse=rounds[-1]["test_rmse"], summary_rmse=summary.final_metrics.get("personal_rmse"),
        first_update_norm_median=float(np.median(update)), first_noise_norm_median=float(np.median(noise)),
        first_release_distance_median=float(np.median(distance)), first_release_distance_max=float(distance.max()),
        dead_from_round=dead,
        final_distance_to_theta=[float(np.linalg.norm(final[j] - THETA, axis=1).min()) for j in range(2)],
        stop_round=stop, best_validation_round=best_round,
        early_stopped_test_rmse=rounds[best_round]["test_rmse"],
        early_stopped_mean_participations=participations / USERS,
        trajectory_test_rmse=[round(r["test_rmse"], 3) for r in rounds],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(6)))
    parser.add_argument("--patience", type=int, default=6)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for rule in ("own_update", "public"):
            for seed in args.seeds:
                results.append(run(rule, seed, out=Path(scratch), patience=args.patience))
                print(json.dumps({k: v for k, v in results[-1].items() if k != "trajectory_test_rmse"}), flush=True)
    (args.out / "metric_own_update.json").write_text(json.dumps(results, indent=1))
    lines = [f"k = 2, nu = {NU:g}, U = {PER_ROUND} of {USERS}, {ROUNDS} rounds, seeds {args.seeds}, patience {args.patience}; "
             f"{time.perf_counter() - started:.0f} s", "",
             "| rule | seed | update norm, rounds 0-2 (median) | noise norm (median) | release to nearest theta* (median / max) | "
             "a hypothesis nobody's best from round | final hypotheses' distance to nearest theta* | test RMSE after 100 rounds | "
             "early stop: round (best validation round) | test RMSE at best validation | participations per user to the stop |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(
            f"| {r['rule']} | {r['seed']} | {r['first_update_norm_median']:.2f} | {r['first_noise_norm_median']:.2f} | "
            f"{r['first_release_distance_median']:.2f} / {r['first_release_distance_max']:.1f} | "
            f"{r['dead_from_round'] if r['dead_from_round'] is not None else 'never'} | "
            f"{' / '.join(f'{d:.2f}' for d in r['final_distance_to_theta'])} | {r['final_test_rmse']:.3f} | "
            f"{r['stop_round']} ({r['best_validation_round']}) | {r['early_stopped_test_rmse']:.3f} | "
            f"{r['early_stopped_mean_participations']:.2f} |")
    for rule in ("own_update", "public"):
        finals = [r["final_test_rmse"] for r in results if r["rule"] == rule]
        stopped = [r["early_stopped_test_rmse"] for r in results if r["rule"] == rule]
        lines.append("")
        lines.append(f"{rule}: test RMSE after 100 rounds median {statistics.median(finals):.3f} "
                     f"(min {min(finals):.3f}, max {max(finals):.3f}); with early stopping median "
                     f"{statistics.median(stopped):.3f} (min {min(stopped):.3f}, max {max(stopped):.3f})")
    (args.out / "metric_own_update.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
