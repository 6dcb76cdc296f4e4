"""A ``metric_local`` cell of an experiment (docs/results.md §10, docs/metric-privacy.md §5).

The scenario's ``model_dim`` is set to the model's parameter count (n enters the leakage
``n / nu``), the metric planner plans it and the ``metric_laplace`` mechanism trains it
with the cell's strategy (``metric_ifca``). The cell records the per-client leakage
(median and maximum over clients, the paper's Table 1) and participations as *metric
leakage*, beside the personal RMSE or accuracy; ``epsilon_spent`` stays empty: a leakage
is not an epsilon and is never shown as one.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from accounting.errors import GdpfedError
from planner.units.metric_local import NAME
from trainer.experiments.cell import CellResult, cell_data, infeasible, train_cell
from trainer.experiments.config import CellSpec


def run_metric_cell(spec: CellSpec, out: Path, config: Any, base: dict[str, Any], started: float) -> CellResult:
    """Plan the metric scenario for the model's size, train it, record leakage and error."""
    from planner.units import make_plan
    from planner.units.metric_local import MetricPlan, MetricScenario

    scenario = MetricScenario.model_validate({**spec.scenario, "model_dim": spec.scenario.get("model_dim", 1)})
    dataset, dim = cell_data(spec, config, scenario.total_clients)
    try:
        plan = make_plan(scenario.model_copy(update={"model_dim": dim}), spec.plan_method)
    except GdpfedError as exc:
        return infeasible(base, exc, dim, started, privacy_unit=NAME)
    assert isinstance(plan, MetricPlan)
    summary = train_cell(spec, out, config, plan, dataset)
    final = dict(summary.final_metrics)
    return CellResult(
        **base, complete=summary.complete, status="ok", model_dim=dim,
        wall_seconds=time.perf_counter() - started,
        final_accuracy=summary.final_accuracy, best_accuracy=summary.best_accuracy, final_loss=summary.final_loss,
        final_rmse=final.get("personal_rmse", final.get("personal_train_rmse")),
        noise_multipliers={g.id: g.noise_multiplier for g in plan.groups},
        sampling_rates={g.id: plan.sampling_rate for g in plan.groups},
        expected_clients={g.id: plan.sampling_rate * g.num_clients for g in plan.groups},
        privacy_unit=summary.privacy_unit,
        leakage_per_participation={g.id: g.leakage_per_participation for g in plan.groups},
        metric_leakage_median=final.get("metric_leakage_median"),
        metric_leakage_max=final.get("metric_leakage_max"),
        metric_participations_median=final.get("metric_participations_median"),
        metric_participations_max=final.get("metric_participations_max"),
        final_metrics=final,
    )
