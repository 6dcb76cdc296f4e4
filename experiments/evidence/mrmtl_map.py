"""Where does MR-MTL beat both endpoints on rotated digits? (issue 30, docs/results.md §8.2)

The paper (Liu et al. 2022) says MR-MTL's advantage over local training and FedAvg is driven
by heterogeneity (how different the silos' tasks are), silo size and epsilon. This script
sweeps exactly those on the rotated-digits silos of docs/mrmtl.md §7 and trains every cell
with the real trainer (``trainer.runner.prepare_run`` / ``execute_run``: the silo
planner's sigma_k, the DP-SGD engine, the method's strategy, the ledger):

- heterogeneity: rotation groups g in {1, 2, 4} (silo k rotated by 90 (k mod g) degrees) and
  the silo-specific 2x2 patch mask off or on with probability p_k ~ U[0.1, 0.9];
- silo size n in {50, 400} training examples (40 silos, 100 test examples each);
- epsilon per silo in {0.5, 1.5, 4} (delta 1e-5);
- rounds T in {10, 40} (one epoch each): MR-MTL's anchor is fixed within a round, so the
  server mean moves by about one gradient / lambda per round against FedAvg's lr x steps;
  at large lambda it needs many rounds (docs/results.md §8.2), while the noise each round
  carries grows with T at a fixed epsilon;

methods local, fedavg and mrmtl at lambda in {0.1, 0.3, 1, 3} (linear model, lr 0.5,
batch 32, clip 1: the other sizes of experiments/mrmtl.yaml).

The dataset is built here (``silo_data``) rather than by ``trainer.data.silos.rotated_digits``
because that loader fixes the mask probabilities; with ``mask=True`` and g = 4 the two
draw the same rows, rotations, patches and probabilities, and every setting of one seed
draws the same rows (checked in tests/trainer/test_mrmtl_evidence.py). Each finished cell is written at once to
``OUT/cells/<id>.json``, so a run stopped by ``--deadline`` or a timeout keeps what it did;
a rerun skips finished cells. ``OUT/map.md`` / ``map.csv`` summarise.

    python experiments/evidence/mrmtl_map.py --out DIR [--jobs N] [--seeds 0 1] [--deadline S] [--runs DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import sys
import time
from collections import defaultdict
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

GROUPS = (1, 2, 4)
MASKS = (False, True)
SIZES = (50, 400)
EPSILONS = (0.5, 1.5, 4.0)
# (rounds, lr): the sizes of experiments/mrmtl.yaml, and a long run at a tenth of its step
REGIMES = ((10, 0.5), (40, 0.05))
LAMBDAS = (0.1, 0.3, 1.0, 3.0)
NUM_SILOS = 40
TEST_SAMPLES = 100


def silo_data(sizes: list[int], *, seed: int, groups: int, mask: bool) -> Any:
    """Rotated digits (docs/mrmtl.md §7) with ``groups`` rotation groups and the patch
    mask on or off: ``trainer.data.silos.rotated_digits`` with the map's knobs."""
    from trainer.data.silos import rotated_digits

    return rotated_digits(sizes, seed=seed, test_samples=TEST_SAMPLES, groups=groups, masks=mask)


def cells(seeds: list[int]) -> list[dict[str, Any]]:
    """Every cell, seed-major (a deadline cuts later seeds, not whole settings), the
    longest first within a seed (DP-SGD steps T ceil(n / 32)) so the pool ends evenly."""
    methods: list[tuple[str, str, float | None]] = [("local", "local", None), ("fedavg", "fedavg", None)]
    methods += [(f"mrmtl-{lam:g}", "mrmtl", lam) for lam in LAMBDAS]
    out: list[dict[str, Any]] = []
    for seed in seeds:
        this_seed = []
        for eps in EPSILONS:
            for groups in GROUPS:
                for mask in MASKS:
                    for n in SIZES:
                        for rounds, lr in REGIMES:
                            setting = f"g{groups}-{'mask' if mask else 'nomask'}-n{n}-eps{eps:g}-T{rounds}-lr{lr:g}"
                            for name, plan, lam in methods:
                                this_seed.append(dict(cell_id=f"{setting}__{name}__s{seed}", setting=setting, groups=groups,
                                                mask=mask, n=n, epsilon=eps, rounds=rounds, lr=lr, method=name, plan=plan,
                                                prox=lam, seed=seed))
        out += sorted(this_seed, key=lambda c: -c["rounds"] * math.ceil(c["n"] / 32))
    return out


def run_cell(cell: dict[str, Any], out: Path, runs: Path | None = None) -> dict[str, Any]:
    """Plan and train one cell with the trainer; its record (also written to ``out/cells``);
    the trainer's run directory goes under ``runs`` (default ``out/runs``)."""
    import torch

    from planner.units import make_plan
    from planner.units.silo_sample import SiloSamplePlan, SiloScenario
    from trainer.runner import TrainConfig, execute_run, prepare_run

    torch.set_num_threads(1)
    started = time.perf_counter()
    scenario = SiloScenario.model_validate(dict(
        privacy_unit="silo_sample", delta=1e-5, rounds=cell["rounds"], batch_size=32, clip_norm=1.0,
        silos=[dict(id=f"silo-{k:02d}", num_samples=cell["n"], epsilon=cell["epsilon"]) for k in range(NUM_SILOS)],
    ))
    plan = make_plan(scenario, cell["plan"])
    assert isinstance(plan, SiloSamplePlan)
    data = silo_data([cell["n"]] * NUM_SILOS, seed=cell["seed"], groups=cell["groups"], mask=cell["mask"])
    options = {} if cell["prox"] is None else {"prox": cell["prox"]}
    config = TrainConfig(dataset="rotated_digits", model="mlp", model_options={"hidden": []},
                         rounds=cell["rounds"], seed=cell["seed"], lr=cell["lr"], eval_every=cell["rounds"],
                         checkpoint_every=cell["rounds"], strategy="plan",
                         strategy_options=options)
    prepared = prepare_run(plan, plan.model_dump(mode="json"), config, (runs or out / "runs") / cell["cell_id"], device="cpu",
                           dataset=data)
    from trainer.experiments.cell import Discard
    from trainer.run.progress import Progress

    summary = execute_run(prepared, progress=Progress(cell["rounds"], 0, stream=Discard(), use_bar=False))
    record = dict(cell, accuracy=summary.final_accuracy, loss=summary.final_loss,
                  sigma=plan.silos[0].noise_multiplier, epsilon_spent=max(v for v in summary.epsilon_spent.values() if v is not None),
                  wall_seconds=time.perf_counter() - started)
    path = out / "cells" / f"{cell['cell_id']}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, path)
    return record


def summarise(out: Path) -> None:
    """``map.csv`` (one row per setting) and ``map.md``: mean accuracy over seeds per method,
    the best lambda, and whether the best MR-MTL beats both endpoints (paired by seed)."""
    records = [json.loads(p.read_text()) for p in sorted((out / "cells").glob("*.json"))]
    by_setting: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    info: dict[str, dict[str, Any]] = {}
    for r in records:
        by_setting[r["setting"]][r["method"]][r["seed"]] = r["accuracy"]
        info[r["setting"]] = r
    rows = []
    for setting, methods in by_setting.items():
        endpoints = ("local", "fedavg")
        mrmtl = [m for m in methods if m.startswith("mrmtl-")]
        if not all(e in methods for e in endpoints) or not mrmtl:
            continue
        seeds = sorted(set.intersection(*(set(methods[m]) for m in (*endpoints, *mrmtl))))
        if not seeds:
            continue
        mean = {m: statistics.fmean(methods[m][s] for s in seeds) for m in (*endpoints, *mrmtl)}
        best = max(mrmtl, key=lambda m: mean[m])
        # paired by seed: MR-MTL (the lambda best on average) minus the better endpoint
        gaps = [methods[best][s] - max(methods[e][s] for e in endpoints) for s in seeds]
        margin = statistics.fmean(gaps)
        spread = statistics.stdev(gaps) if len(gaps) > 1 else math.nan
        verdict = "beats both" if min(gaps) > 0 else ("ties" if max(gaps) >= 0 else "below")
        i = info[setting]
        rows.append(dict(setting=setting, groups=i["groups"], mask=i["mask"], n=i["n"], epsilon=i["epsilon"],
                         rounds=i["rounds"], lr=i["lr"],
                         seeds=len(seeds), local=mean["local"], fedavg=mean["fedavg"], best_lambda=best.split("-", 1)[1],
                         mrmtl=mean[best], margin=margin, margin_std=spread, verdict=verdict,
                         **{m: mean[m] for m in mrmtl}))
    rows.sort(key=lambda r: (r["epsilon"], r["groups"], r["mask"], r["n"], r["rounds"], r["lr"]))
    if not rows:
        return
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(out / "map.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    lines = ["| eps | rotation groups | mask | n | rounds, lr | seeds | local | fedavg | best MR-MTL (lambda) | margin over better endpoint (paired, mean ± std) | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['epsilon']:g} | {r['groups']} | {'on' if r['mask'] else 'off'} | {r['n']} | {r['rounds']}, {r['lr']:g} | {r['seeds']} | "
                     f"{r['local']:.3f} | {r['fedavg']:.3f} | {r['mrmtl']:.3f} ({r['best_lambda']}) | "
                     f"{r['margin']:+.3f} ± {r['margin_std']:.3f} | {r['verdict']} |")
    walls = [r["wall_seconds"] for r in records]
    lines.append("")
    lines.append(f"{len(records)} cells, cell wall time {sum(walls):.0f} s in all (min {min(walls):.1f}, max {max(walls):.1f}).")
    (out / "map.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--deadline", type=float, default=math.inf, help="submit no cell after this many seconds")
    parser.add_argument("--only", nargs="*", default=None, help="settings to run (default: all)")
    parser.add_argument("--runs", type=Path, default=None, help="the trainer's run directories (default OUT/runs)")
    args = parser.parse_args(argv)
    (args.out / "cells").mkdir(parents=True, exist_ok=True)
    todo = [c for c in cells(args.seeds) if not (args.out / "cells" / f"{c['cell_id']}.json").exists()]
    if args.only:
        todo = [c for c in todo if c["setting"] in args.only]
    started = time.monotonic()
    print(f"mrmtl_map: {len(todo)} cells to run, {args.jobs} jobs", flush=True)
    import multiprocessing

    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        pending: set[Any] = set()
        queue = list(todo)
        done = 0
        while queue or pending:
            while queue and len(pending) < args.jobs and time.monotonic() - started < args.deadline:
                pending.add(pool.submit(run_cell, queue.pop(0), args.out, args.runs))
            if not pending:
                break
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                done += 1
                try:
                    r = future.result()
                    print(f"[{done}] {r['cell_id']}: accuracy {r['accuracy']:.4f} in {r['wall_seconds']:.1f}s", flush=True)
                except Exception as exc:  # a failed cell is reported, the others go on
                    print(f"[{done}] failed: {exc!r}", file=sys.stderr, flush=True)
        if queue:
            print(f"mrmtl_map: deadline reached, {len(queue)} cells not started", flush=True)
    summarise(args.out)
    print(f"mrmtl_map: {time.monotonic() - started:.0f} s; wrote {args.out / 'map.md'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
