"""An experiment's reports: ``results.csv``, ``results.md`` and ``accuracy.png`` (only when a cell measured accuracy).

(docs/results.md §Runner.) ``results.csv`` has one row per finished cell.
``results.md`` has, per setting, the final test accuracy as mean ± sample standard
deviation over seeds (methods x datasets), and a noise table: per dataset and method the
plan's noise multipliers, sampling rates, keep ratios and noise energy
``(d C^2 / K^2) sum_P kappa_P sigma_P^2`` next to the accuracy reached. Plans do not
depend on the seed, so the noise columns come from the first seed's cell.
``accuracy.png`` draws the same means with standard-deviation bars, one panel per dataset.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from planner import Scenario, sweep
from planner.sweep import plot_sweep
from trainer.experiments.cell import CellResult
from trainer.experiments.config import CellSpec, SweepExperiment, TrainExperiment
from trainer.experiments.units import EXPERIMENT_UNITS
from trainer.run.plots import SMOKE_MARK, mark_smoke

CSV_COLUMNS = [
    "cell_id",
    "setting",
    "dataset",
    "method",
    "plan_method",
    "seed",
    "status",
    "final_accuracy",
    "best_accuracy",
    "final_loss",
    "noise_energy",
    "noise_multipliers",
    "sampling_rates",
    "expected_clients",
    "keep_ratios",
    "epsilon_spent",
    "privacy_unit",
    "final_rmse",
    "leakage_per_participation",
    "metric_leakage_median",
    "metric_leakage_max",
    "metric_participations_median",
    "metric_participations_max",
    "aborted_pool_rounds",
    "secagg",
    "rounds",
    "model_dim",
    "wall_seconds",
    "smoke",
    "command",
]


def format_map(values: Mapping[str, float | None], digits: int = 4) -> str:
    """``{"P1": 1.23456}`` -> ``"P1=1.235"`` (entries joined by ``; ``)."""
    return "; ".join(f"{k}={'null' if v is None else format(v, f'.{digits}g')}" for k, v in values.items())


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    mean = statistics.fmean(values)
    return mean, (statistics.stdev(values) if len(values) > 1 else 0.0)


def write_csv(results: Sequence[CellResult], path: Path) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for r in results:
            writer.writerow(
                {
                    "cell_id": r.cell_id,
                    "setting": r.setting,
                    "dataset": r.dataset,
                    "method": r.method,
                    "plan_method": r.plan_method,
                    "seed": r.seed,
                    "status": r.status,
                    "final_accuracy": _number(r.final_accuracy),
                    "best_accuracy": _number(r.best_accuracy),
                    "final_loss": _number(r.final_loss),
                    "noise_energy": _number(r.noise_energy),
                    "noise_multipliers": format_map(r.noise_multipliers, 6),
                    "sampling_rates": format_map(r.sampling_rates, 6),
                    "expected_clients": format_map(r.expected_clients, 6),
                    "keep_ratios": format_map(r.keep_ratios, 6),
                    "epsilon_spent": format_map(r.epsilon_spent, 6),
                    "privacy_unit": r.privacy_unit,
                    "final_rmse": _number(r.final_rmse),
                    "leakage_per_participation": format_map(r.leakage_per_participation, 6),
                    "metric_leakage_median": _number(r.metric_leakage_median),
                    "metric_leakage_max": _number(r.metric_leakage_max),
                    "metric_participations_median": _number(r.metric_participations_median),
                    "metric_participations_max": _number(r.metric_participations_max),
                    "aborted_pool_rounds": r.aborted_pool_rounds,
                    "secagg": secagg_text(r),
                    "rounds": r.rounds,
                    "model_dim": "" if r.model_dim is None else r.model_dim,
                    "wall_seconds": f"{r.wall_seconds:.3f}",
                    "smoke": r.smoke,
                    "command": r.command,
                }
            )
    return path


def secagg_text(result: CellResult) -> str:
    """``protocol: P1=full; P2=sparse k=32 t=31`` (which secure aggregation the cell ran)."""
    if result.secagg_execution is None:
        return ""
    graphs = "; ".join(f"{pool}={', '.join(ran)}" for pool, ran in result.secagg_graphs.items() if ran)
    return f"{result.secagg_execution}: {graphs}" if graphs else result.secagg_execution


def _number(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def _cell_text(results: list[CellResult]) -> str:
    if not results:
        return "—"
    if any(r.status != "ok" for r in results):
        return "infeasible"
    values = [r.final_accuracy for r in results if r.final_accuracy is not None]
    if not values:
        return "—"
    mean, std = mean_std(values)
    return f"{mean:.4f} ± {std:.4f} (n={len(values)})"


def _silo_range(values: Mapping[str, float]) -> str:
    """``silos: 0.81–5.06 (40 silos)``: the per-silo DP-SGD values of a silo cell, compactly."""
    if not values:
        return ""
    low, high = min(values.values()), max(values.values())
    span = f"{low:.4g}" if low == high else f"{low:.4g}–{high:.4g}"
    return f"silos: {span} ({len(values)} silos)"


def _mean_text(values: Sequence[float | None], digits: int = 4) -> str:
    present = [v for v in values if v is not None]
    if not present:
        return "—"
    mean, std = mean_std(present)
    return f"{mean:.{digits}g} ± {std:.{digits}g}" if len(present) > 1 else f"{mean:.{digits}g}"


def metric_table(experiment: TrainExperiment, results: Sequence[CellResult]) -> list[str]:
    """Per setting, dataset and method of the metric cells: nu, the leakage of one release
    (n / nu), the median and maximum total leakage over clients and participations (the
    paper's Table 1), beside personal accuracy or RMSE; mean ± std over seeds."""
    lines = [
        "## Metric leakage (not epsilon) and error",
        "",
        "| setting | dataset | method | nu | leakage per release (n / nu) | leakage median over clients "
        "| leakage max over clients | participations median / max | personal accuracy | personal RMSE |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for setting in experiment.settings:
        for d in experiment.datasets:
            for method in experiment.method_names():
                runs = sorted(
                    (r for r in results if (r.setting, r.dataset, r.method) == (setting.name, d.name, method)),
                    key=lambda r: r.seed,
                )
                if not runs:
                    continue
                first = runs[0]
                per = format_map(first.leakage_per_participation)
                none = all(v is None for v in first.leakage_per_participation.values())
                lines.append(
                    f"| {setting.name} | {d.name} | {method} | {format_map(first.noise_multipliers)} | "
                    f"{per}{' (nu = 0: no guarantee)' if none else ''} | "
                    f"{_mean_text([r.metric_leakage_median for r in runs])} | {_mean_text([r.metric_leakage_max for r in runs])} | "
                    f"{_mean_text([r.metric_participations_median for r in runs])} / "
                    f"{_mean_text([r.metric_participations_max for r in runs])} | "
                    f"{_mean_text([r.final_accuracy for r in runs])} | {_mean_text([r.final_rmse for r in runs])} |"
                )
    return [*lines, ""]


def accuracy_caption(seeds: Sequence[int]) -> str:
    """The accuracy tables' caption: how many seeds the mean and std are over, and which."""
    if len(seeds) == 1:
        return f"Final test accuracy, one seed (seed {seeds[0]}; no std)"
    return f"Final test accuracy, mean ± std over {len(seeds)} seeds ({', '.join(str(s) for s in seeds)})"


def markdown_tables(experiment: TrainExperiment, results: Sequence[CellResult]) -> str:
    """The accuracy table of every setting and the noise table (see the module docstring)."""
    by_key: dict[tuple[str, str, str], list[CellResult]] = {}
    for r in results:
        by_key.setdefault((r.setting, r.dataset, r.method), []).append(r)
    datasets = [d.name for d in experiment.datasets]
    lines = [f"# {experiment.name}", ""]
    if experiment.description:
        lines += [experiment.description.strip(), ""]
    seeds = ", ".join(str(s) for s in experiment.seeds)
    smoke = any(r.smoke for r in results)
    # a setting's accuracy table only where some cell measured accuracy (or failed): regression
    # cells (metric_synthetic) have none, and a table of dashes says nothing
    shown = [s for s in experiment.settings
             if any(r.setting == s.name and (r.final_accuracy is not None or r.status != "ok") for r in results)]
    measured = any(r.final_accuracy is not None for r in results)
    lines += [
        (accuracy_caption(experiment.seeds) if shown else f"Seeds {seeds}; no cell measures accuracy")
        + f"{' — SMOKE SIZE, not a result' if smoke else ''}.",
        "",
    ]
    units = sorted({r.privacy_unit for r in results})
    if units != ["client"] and units:
        # never let a reader take one notion's figures for another's
        lines += [f"Privacy unit: {', '.join(units)}." + "".join(EXPERIMENT_UNITS[u].report_note for u in units), ""]
    for setting in shown:
        lines += [f"## Accuracy: {setting.name}", ""]
        lines.append("| method | " + " | ".join(datasets) + " |")
        lines.append("|---|" + "---|" * len(datasets))
        for method in experiment.method_names():
            cells = [_cell_text(by_key.get((setting.name, d, method), [])) for d in datasets]
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
        lines.append("")
    leakages = [r for r in results if EXPERIMENT_UNITS[r.privacy_unit].leakage_table]
    if leakages:
        lines += metric_table(experiment, leakages)
    noise = (EXPERIMENT_UNITS[units[0]].noise_header or "noise multipliers (pool=sigma)") if len(units) == 1 \
        else "noise multipliers (pool=sigma; metric cells: nu=metric noise multiplier)"
    lines += ["## Noise (from the plans)" + (" and accuracy" if measured else ""), ""]
    lines.append(
        f"| setting | dataset | method | {noise} | sampling rates | keep ratios | noise energy |"
        + (" accuracy |" if measured else "")
    )
    lines.append("|---|---|---|---|---|---|---|" + ("---|" if measured else ""))
    for setting in experiment.settings:
        for d in datasets:
            for method in experiment.method_names():
                runs = sorted(by_key.get((setting.name, d, method), []), key=lambda r: r.seed)
                if not runs:
                    continue
                first = runs[0]
                if first.status != "ok":
                    lines.append(f"| {setting.name} | {d} | {method} | infeasible: {first.error} | | | |" + (" |" if measured else ""))
                    continue
                energy = "" if first.noise_energy is None else f"{first.noise_energy:.4g}"
                sigmas, rates = format_map(first.noise_multipliers), format_map(first.sampling_rates)
                if EXPERIMENT_UNITS[first.privacy_unit].noise_range:  # one DP-SGD sigma_k per silo: their range
                    sigmas, rates = _silo_range(first.noise_multipliers), _silo_range(first.sampling_rates)
                lines.append(
                    f"| {setting.name} | {d} | {method} | {sigmas} | "
                    f"{rates} | {format_map(first.keep_ratios)} | {energy} |" + (f" {_cell_text(runs)} |" if measured else "")
                )
    lines.append("")
    executions = sorted({r.secagg_execution for r in results if r.secagg_execution is not None})
    if executions:
        named = {"protocol": "the real protocol", "exact_sum": "its exact-sum simulation (no cryptography)"}
        lines.append(
            "Secure aggregation: " + " and ".join(named.get(e, e) for e in executions)
            + "; each cell's graphs are in the CSV's secagg column."
        )
    total = sum(r.wall_seconds for r in results)
    lines.append(f"{len(results)} cells, {total:.1f} s of cell wall time in total.")
    return "\n".join(lines) + "\n"


def accuracy_figure(experiment: TrainExperiment, results: Sequence[CellResult]) -> Any:
    """Grouped bars: x = settings, one bar per method, mean ± std; one panel per dataset;
    ``SMOKE_MARK`` across it when any cell ran at smoke size."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    datasets = [d.name for d in experiment.datasets]
    settings = [s.name for s in experiment.settings]
    methods = experiment.method_names()
    figure = Figure(figsize=(max(5.0, 1.2 * len(settings) * len(methods) ** 0.5 + 3) * len(datasets) ** 0.8, 4))
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, len(datasets), squeeze=False)
    width = 0.8 / len(methods)
    for panel, dataset in zip(axes[0], datasets):
        for m_index, method in enumerate(methods):
            xs, means, stds = [], [], []
            for s_index, setting in enumerate(settings):
                values = [
                    r.final_accuracy
                    for r in results
                    if r.setting == setting and r.dataset == dataset and r.method == method
                    and r.status == "ok" and r.final_accuracy is not None
                ]
                if values:
                    mean, std = mean_std(values)
                    xs.append(s_index - 0.4 + width * (m_index + 0.5))
                    means.append(mean)
                    stds.append(std)
            if xs:
                panel.bar(xs, means, width=width, yerr=stds, capsize=2, label=method)
        panel.set_xticks(range(len(settings)))
        panel.set_xticklabels(settings, rotation=30, ha="right", fontsize=8)
        panel.set_ylim(0, 1)
        panel.set_title(dataset)
        panel.set_ylabel("final test accuracy")
        panel.grid(True, axis="y", alpha=0.3)
    if axes[0][-1].get_legend_handles_labels()[0]:
        axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    figure.suptitle(experiment.name + (" (smoke size)" if any(r.smoke for r in results) else ""))
    figure.tight_layout()
    if any(r.smoke for r in results):
        mark_smoke(figure)
    return figure


def plot_accuracy(experiment: TrainExperiment, results: Sequence[CellResult], path: Path) -> Path:
    """``accuracy_figure`` as a PNG at ``path``."""
    accuracy_figure(experiment, results).savefig(path, format="png", dpi=110)
    return path


def write_reports(
    experiment: TrainExperiment, cells: Sequence[CellSpec], results: Sequence[CellResult], out: Path
) -> list[Path]:
    """``results.csv``, ``results.md``, ``accuracy.png`` from the finished cells, in grid order."""
    order = {c.cell_id: i for i, c in enumerate(cells)}
    ordered = sorted(results, key=lambda r: order.get(r.cell_id, math.inf))
    files = [write_csv(ordered, out / "results.csv")]
    markdown = out / "results.md"
    markdown.write_text(markdown_tables(experiment, ordered), encoding="utf-8")
    files.append(markdown)
    plot = out / "accuracy.png"
    if any(r.final_accuracy is not None for r in ordered):
        files.append(plot_accuracy(experiment, ordered, plot))
    else:  # no cell measured accuracy (regression): no empty plot, nor a stale one
        plot.unlink(missing_ok=True)
    return files


def write_sweep(experiment: SweepExperiment, out: Path, *, smoke: bool = False) -> list[Path]:
    """The planner's sampling-rate sweep: ``sweep.csv``, ``sweep.md``, ``sweep.png``."""
    epsilons = experiment.epsilons
    if smoke:
        epsilons = experiment.smoke_epsilons or epsilons[:2]
    scenario = Scenario.model_validate(experiment.scenario)
    result = sweep(scenario, experiment.group, epsilons, experiment.method)  # type: ignore[arg-type]
    groups = list(result.sampling_rates)
    csv_path = out / "sweep.csv"
    with csv_path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["epsilon"] + [f"q_{g}" for g in groups] + [f"expected_clients_{g}" for g in groups]
            + ["noise_energy", "objective", "error"]
        )
        for i, eps in enumerate(result.epsilons):
            writer.writerow(
                [repr(eps)]
                + [_number(result.sampling_rates[g][i]) for g in groups]
                + [_number(result.expected_clients[g][i]) for g in groups]
                + [_number(result.noise_energy[i]), _number(result.objective[i]), result.errors[i] or ""]
            )
    lines = [f"# {experiment.name}", ""]
    if experiment.description:
        lines += [experiment.description.strip(), ""]
    lines += [
        f"{result.method}: optimal sampling rate q_g of every group as group {result.group_id}'s epsilon varies"
        # as results.md says it: a smoke table's epsilons are the smoke ones, not the study's
        + f"{' — SMOKE SIZE, not a result' if smoke else ''}.",
        "",
        "| epsilon | " + " | ".join(f"q {g} (E clients)" for g in groups) + " | noise energy | objective |",
        "|---|" + "---|" * (len(groups) + 2),
    ]
    for i, eps in enumerate(result.epsilons):
        if result.errors[i]:
            lines.append(f"| {eps:g} | infeasible: {result.errors[i]} |" + " |" * (len(groups) + 1))
            continue
        rates = [
            f"{result.sampling_rates[g][i]:.4f} ({result.expected_clients[g][i]:.2f})" for g in groups
        ]
        lines.append(
            f"| {eps:g} | " + " | ".join(rates) + f" | {result.noise_energy[i]:.4g} | {result.objective[i]:.4g} |"
        )
    md_path = out / "sweep.md"
    md_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    png_path = plot_sweep(result, out / "sweep.png", watermark=SMOKE_MARK if smoke else None)
    return [csv_path, md_path, png_path]
