"""When can GDPFed / GDPFed- / GDPFed+ beat DP-FedAvg? The planner's map (issue 30, docs/results.md §12).

Two groups, a strict one at epsilon 1 and a loose one at epsilon ``spread``, N = 240 clients
split as ``ratio`` = N_loose / N_strict, K = 48 expected clients a round, T = 30 rounds,
delta 1e-3, RDP, d = 1 210 (the digits MLP), C = 1, ``min_clients_per_pool`` 1: the main
table's setting (experiments/main.yaml) with its three groups reduced to two so that the
question has two axes. Every cell is planned (no training) with ``dp_fedavg`` (one pool,
everyone at the strict budget), ``gdpfed`` (one pool per group, uniform rates),
``gdpfed_minus`` (one pool per group, optimised rates, no sparsification), ``gdpfed_plus``
(optimised rates and keep ratios 0.5 strict / 0.9 loose) and ``idp_sample`` (one shared
pool at per-group rates); the map is each method's planned noise energy
``(d C^2 / K^2) sum_P kappa_P sigma_P^2`` divided by DP-FedAvg's at the same cell (below 1:
the method plans less noise for the same expected clients, so the same signal).

    python experiments/evidence/gdpfed_map.py --out DIR
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path
from typing import Any, cast

SPREADS = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 16.0)
# N_loose / N_strict over N = 240 clients
SPLITS = ((210, 30), (180, 60), (120, 120), (60, 180), (30, 210))
METHODS = ("dp_fedavg", "gdpfed", "gdpfed_minus", "gdpfed_plus", "idp_sample")


def scenario(spread: float, strict: int, loose: int, *, keep: tuple[float, float] = (0.5, 0.9)) -> dict[str, Any]:
    """The two-group scenario of one map cell (keep ratios used by gdpfed_plus only)."""
    return dict(
        groups=[dict(id="strict", epsilon=1.0, num_clients=strict, keep_ratio=keep[0]),
                dict(id="loose", epsilon=spread, num_clients=loose, keep_ratio=keep[1])],
        delta=1e-3, rounds=30, clip_norm=1.0, expected_clients=48, accountant="rdp", keep_ratio=1.0,
        min_clients_per_pool=1, model_dim=1210,
    )


def plan_cell(spread: float, strict: int, loose: int) -> dict[str, Any]:
    """Plan one cell with every method; noise energies, their ratio to DP-FedAvg's, the rates."""
    from accounting.errors import GdpfedError
    from planner import Scenario, make_plan

    row: dict[str, Any] = dict(spread=spread, strict=strict, loose=loose, ratio=loose / strict)
    for method in METHODS:
        try:
            plan = make_plan(Scenario.model_validate(scenario(spread, strict, loose)), cast(Any, method))
        except GdpfedError as exc:
            row[f"{method}_energy"] = math.nan
            row[f"{method}_note"] = exc.message
            continue
        row[f"{method}_energy"] = plan.predicted.noise_energy
        row[f"{method}_objective"] = plan.predicted.objective
        row[f"{method}_rates"] = "/".join(f"{g.sampling_rate:.3g}" for g in plan.groups)
        row[f"{method}_sigmas"] = "/".join(f"{p.noise_multiplier:.3g}" for p in plan.pools)
    base = row["dp_fedavg_energy"]
    for method in METHODS[1:]:
        row[f"{method}_vs_fedavg"] = row[f"{method}_energy"] / base
    # with sparsification the objective adds its bias term (docs/planning.md §3); DP-FedAvg keeps all
    row["gdpfed_plus_objective_vs_fedavg"] = row["gdpfed_plus_objective"] / row["dp_fedavg_objective"]
    # the two-pool law of docs/results.md §12: GDPFed- wins about when spread > N / N_loose
    row["law_threshold"] = (strict + loose) / loose
    return row


def table(rows: list[dict[str, Any]], method: str, key: str = "vs_fedavg", what: str = "noise energy") -> list[str]:
    """Markdown: spread down, N_loose / N_strict across, the method's energy over DP-FedAvg's."""
    lines = [f"{method} {what} / dp_fedavg's (rows: epsilon_loose / epsilon_strict; columns: N_loose / N_strict)", "",
             "| spread | " + " | ".join(f"{loose}/{strict}" for loose, strict in SPLITS) + " |",
             "|---|" + "---|" * len(SPLITS)]
    for spread in SPREADS:
        cells = []
        for loose, _strict in SPLITS:
            r = next(r for r in rows if r["spread"] == spread and r["loose"] == loose)
            value = r[f"{method}_{key}"]
            cells.append(f"**{value:.2f}**" if value < 0.995 else f"{value:.2f}")
        lines.append(f"| {spread:g} | " + " | ".join(cells) + " |")
    return lines + [""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [plan_cell(spread, strict, loose) for spread in SPREADS for loose, strict in SPLITS]
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(args.out / "gdpfed_map.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    lines: list[str] = []
    for method in METHODS[1:]:
        lines += table(rows, method)
    lines += table(rows, "gdpfed_plus", "objective_vs_fedavg", "objective (noise energy + sparsification error)")
    (args.out / "gdpfed_map.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
