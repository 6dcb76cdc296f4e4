"""One cell of an experiment: plan the scenario for the model's size, train, record.

(docs/results.md §Runner.) The scenario's ``model_dim`` is set to the model's parameter
count before planning, so the plan's noise energy and ``keep_ratio: auto`` are for the
model actually trained. Torch runs single-threaded inside a cell: results then do not
depend on ``--jobs`` (float sums in multi-threaded kernels may be ordered differently),
which is what makes a cell's recorded command reproduce its number exactly.
"""

from __future__ import annotations

import io
import shlex
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from accounting.errors import GdpfedError
from planner.units import client as client_unit
from planner.units import metric_local, silo_sample
from trainer.experiments.config import CellSpec, cell_config
from trainer.experiments.units import experiment_unit


class CellResult(BaseModel):
    """``cells/<cell_id>.json``: what one cell measured (a complete cell is never re-run)."""

    cell_id: str
    fingerprint: str
    complete: bool
    status: str = Field(description="ok, or infeasible (the planner refused the scenario for this method)")
    error: str | None = None
    experiment: str
    method: str
    plan_method: str
    dataset: str
    setting: str
    seed: int
    smoke: bool
    command: str = Field(description="the command that re-runs this cell alone")
    wall_seconds: float
    rounds: int
    model_dim: int | None = None
    final_accuracy: float | None = None
    best_accuracy: float | None = None
    final_loss: float | None = None
    noise_multipliers: dict[str, float] = Field(
        default_factory=dict,
        description="pool id -> sigma_P (silo cells: silo id -> DP-SGD sigma_k; metric cells: group id -> Laplace nu)",
    )
    noise_energy: float | None = Field(None, description="plan's (d C^2 / K^2) sum_P kappa_P sigma_P^2")
    sampling_rates: dict[str, float] = Field(default_factory=dict)
    expected_clients: dict[str, float] = Field(default_factory=dict)
    keep_ratios: dict[str, float] = Field(default_factory=dict, description="pool id -> kappa_P")
    epsilon_spent: dict[str, float | None] = Field(default_factory=dict)
    epsilon_target: dict[str, float | None] = Field(default_factory=dict)
    privacy_unit: str = Field(
        "client",
        description="whom the figures protect: client (epsilon per group), silo_sample (epsilon per silo) or "
        "metric_local (metric leakage per client, never an epsilon); never mixed",
    )
    aborted_pool_rounds: int = 0
    accuracy_by_group: dict[str, float | None] | None = Field(
        None, description="global model on each group's clients' local test rows (data with local tests)"
    )
    personal_accuracy: float | None = Field(None, description="personal models on their clients' local test rows")
    personal_accuracy_by_group: dict[str, float | None] | None = None
    final_rmse: float | None = Field(None, description="regression: the personal RMSE on the clients' own test rows")
    leakage_per_participation: dict[str, float | None] = Field(
        default_factory=dict, description="metric cells: group id -> n / nu, the metric leakage of one release"
    )
    metric_leakage_median: float | None = Field(None, description="metric cells: median total leakage over clients")
    metric_leakage_max: float | None = Field(None, description="metric cells: largest total leakage of any client")
    metric_participations_median: float | None = None
    metric_participations_max: float | None = None
    final_metrics: dict[str, float] = Field(
        default_factory=dict, description="the strategy's last evaluation and ledger figures (summary final_metrics)"
    )
    secagg_execution: str | None = Field(None, description="protocol (real secure aggregation) or exact_sum")
    secagg_graphs: dict[str, list[str]] = Field(
        default_factory=dict, description="pool id -> the secure-aggregation graphs its sessions ran"
    )


def rerun_command(spec: CellSpec, out: Path) -> str:
    """``gdpfed experiment CONFIG --only CELL --force --out OUT [--smoke]``."""
    parts = ["gdpfed", "experiment", spec.config_path, "--only", spec.cell_id, "--force", "--out", str(out)]
    if spec.smoke:
        parts.append("--smoke")
    return shlex.join(parts)


def run_cell(spec: CellSpec, out: Path, *, secagg_workers: int | None = None) -> CellResult:
    """Plan and train one cell; its run directory is ``out/runs/<cell_id>`` (replaced).
    ``secagg_workers``: the cell's secure-aggregation processes unless its train options
    set them (``trainer.experiments.runner.cell_secagg_workers``)."""
    # start-up time: torch and the trainer load when a cell runs, not when a configuration is checked
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _run_cell(spec, out, secagg_workers)
    finally:
        torch.set_num_threads(threads)


def _run_cell(spec: CellSpec, out: Path, secagg_workers: int | None = None) -> CellResult:
    """The fields every cell records, its ``TrainConfig``, then its privacy unit's cell
    function (``CELL_RUNS``)."""
    started = time.perf_counter()
    scenario_data = dict(spec.scenario)
    rounds = int(scenario_data["rounds"])
    base: dict[str, Any] = dict(
        cell_id=spec.cell_id,
        fingerprint=spec.fingerprint(),
        experiment=spec.experiment,
        method=spec.method,
        plan_method=spec.plan_method,
        dataset=spec.dataset.name,
        setting=spec.setting,
        seed=spec.seed,
        smoke=spec.smoke,
        command=rerun_command(spec, out),
        rounds=rounds,
    )
    return unit_cell_run(scenario_data)(spec, out, cell_config(spec, secagg_workers), base, started)


def cell_data(spec: CellSpec, config: Any, total_clients: int) -> tuple[Any, int]:
    """The cell's dataset split into ``total_clients`` clients, and its model's parameter count."""
    # start-up time (here and below): torch and the trainer load when a cell runs, not when a configuration is checked
    from trainer.data import load_dataset
    from trainer.engines import num_params
    from trainer.models import build_model

    dataset = load_dataset(
        config.dataset, num_clients=total_clients, partition=config.partition, alpha=config.alpha,
        seed=config.seed, **spec.dataset.options,
    )
    return dataset, num_params(build_model(config.model, dataset, seed=config.seed, **config.model_options))


def infeasible(base: dict[str, Any], exc: GdpfedError, dim: int, started: float, **fields: Any) -> CellResult:
    """The result of a cell whose scenario the planner refused for its method."""
    return CellResult(
        **base, complete=True, status="infeasible", error=exc.message, model_dim=dim,
        wall_seconds=time.perf_counter() - started, **fields,
    )


def train_cell(spec: CellSpec, out: Path, config: Any, plan: Any, dataset: Any = None) -> Any:
    """Train ``plan`` in ``out/runs/<cell_id>`` (replaced: an interrupted earlier attempt
    restarts) on the CPU without per-round output; the run's summary. A smoke-size cell's
    plots get ``SMOKE_MARK`` across them, as the experiment's own plots do."""
    # start-up time: torch and the trainer load when a cell runs, not when a configuration is checked
    from trainer.run.progress import Progress
    from trainer.runner import execute_run, prepare_run

    run_dir = out / "runs" / spec.cell_id
    if run_dir.exists():
        shutil.rmtree(run_dir)
    prepared = prepare_run(plan, plan.model_dump(mode="json"), config, run_dir, device="cpu", dataset=dataset)
    summary = execute_run(prepared, progress=Progress(config.rounds, 0, stream=Discard(), use_bar=False))
    if spec.smoke:
        # start-up time: torch and the trainer load when a cell runs, not when a configuration is checked
        from trainer.run.plots import mark_smoke_pngs

        mark_smoke_pngs(run_dir)
    return summary


def run_client_cell(spec: CellSpec, out: Path, config: Any, base: dict[str, Any], started: float) -> CellResult:
    """A client-level cell: plan the scenario for the model's size with the cell's method,
    then train it (epsilons client-level, per group)."""
    # start-up time: the planner's methods (scipy) load when a cell is planned
    from planner import Scenario, make_plan

    scenario_data = dict(spec.scenario)
    total_clients = sum(int(g["num_clients"]) for g in scenario_data["groups"])
    dataset, dim = cell_data(spec, config, total_clients)
    scenario = Scenario.model_validate({**scenario_data, "model_dim": dim})
    try:
        plan = make_plan(scenario, spec.plan_method, clients_needed=False)  # type: ignore[arg-type]
    except GdpfedError as exc:
        return infeasible(base, exc, dim, started)
    summary = train_cell(spec, out, config, plan, dataset)
    return CellResult(
        **base,
        complete=summary.complete,
        status="ok",
        model_dim=dim,
        wall_seconds=time.perf_counter() - started,
        final_accuracy=summary.final_accuracy,
        best_accuracy=summary.best_accuracy,
        final_loss=summary.final_loss,
        noise_multipliers={p.id: p.noise_multiplier for p in plan.pools},
        noise_energy=plan.predicted.noise_energy,
        sampling_rates={g.id: g.sampling_rate for g in plan.groups},
        expected_clients={g.id: g.expected_clients for g in plan.groups},
        keep_ratios={p.id: p.keep_ratio for p in plan.pools},
        epsilon_spent=summary.epsilon_spent,
        epsilon_target=summary.epsilon_target,
        aborted_pool_rounds=sum(summary.aborted_rounds.values()),
        accuracy_by_group=summary.accuracy_by_group,
        personal_accuracy=summary.personal_accuracy,
        personal_accuracy_by_group=summary.personal_accuracy_by_group,
        secagg_execution=summary.secagg_execution,
        secagg_graphs=summary.secagg_graphs,
    )


def run_silo_cell(spec: CellSpec, out: Path, config: Any, base: dict[str, Any], started: float) -> CellResult:
    """A silo_sample cell: plan every silo's DP-SGD for the method, then train the method's
    strategy (docs/mrmtl.md §8); epsilons here are silo sample-level, per silo."""
    # start-up time: the planner's methods (scipy) load when a cell is planned
    from planner.units import make_plan
    from planner.units.silo_sample import SiloSamplePlan, SiloScenario

    plan = make_plan(SiloScenario.model_validate(spec.scenario), spec.plan_method)
    assert isinstance(plan, SiloSamplePlan)
    summary = train_cell(spec, out, config, plan)
    return CellResult(
        **base, complete=summary.complete, status="ok", model_dim=summary.model_dim,
        wall_seconds=time.perf_counter() - started, final_accuracy=summary.final_accuracy,
        best_accuracy=summary.best_accuracy, final_loss=summary.final_loss,
        noise_multipliers={s.id: s.noise_multiplier for s in plan.silos},
        sampling_rates={s.id: s.sampling_rate for s in plan.silos},
        epsilon_spent=summary.epsilon_spent, epsilon_target=summary.epsilon_target,
        privacy_unit=summary.privacy_unit,
    )


class Discard(io.StringIO):
    """A non-terminal stream that drops the per-round lines (the runner reports per cell)."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        return None

    def isatty(self) -> bool:
        return False


# A metric cell (docs/results.md §10, docs/metric-privacy.md §5): the scenario's
# ``model_dim`` is set to the model's parameter count (n enters the leakage ``n / nu``), the
# metric planner plans it and the ``metric_laplace`` mechanism trains it with the cell's
# strategy (``metric_ifca``). The cell records the per-client leakage (median and maximum
# over clients, the paper's Table 1) and participations as *metric leakage*, beside the
# personal RMSE or accuracy; ``epsilon_spent`` stays empty: a leakage is not an epsilon.
def run_metric_cell(spec: CellSpec, out: Path, config: Any, base: dict[str, Any], started: float) -> CellResult:
    """Plan the metric scenario for the model's size, train it, record leakage and error."""
    # start-up time: the planner's methods (scipy) load when a cell is planned
    from planner.units import make_plan
    from planner.units.metric_local import MetricPlan, MetricScenario

    scenario = MetricScenario.model_validate({**spec.scenario, "model_dim": spec.scenario.get("model_dim", 1)})
    dataset, dim = cell_data(spec, config, scenario.total_clients)
    try:
        plan = make_plan(scenario.model_copy(update={"model_dim": dim}), spec.plan_method)
    except GdpfedError as exc:
        return infeasible(base, exc, dim, started, privacy_unit=metric_local.NAME)
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


# unit -> the function that plans and trains one of its cells (the units are
# trainer.experiments.units.EXPERIMENT_UNITS')
CELL_RUNS: dict[str, Callable[..., CellResult]] = {
    client_unit.UNIT.name: run_client_cell,
    silo_sample.NAME: run_silo_cell,
    metric_local.NAME: run_metric_cell,
}


def unit_cell_run(scenario: dict[str, Any]) -> Callable[..., CellResult]:
    """The cell function of the scenario's privacy unit (an unknown one refused by ``experiment_unit``)."""
    return CELL_RUNS[experiment_unit(scenario).name]
