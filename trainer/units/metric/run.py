"""Training runs of ``metric_local`` plans: the ``metric_laplace`` mechanism (docs/metric-privacy.md §5).

``prepare_metric_run`` validates everything (the plan re-derived by its verifier, rounds
within the plan's, a model whose size is the plan's ``model_dim``, a strategy that
releases individual models) and builds the metric round engine; ``execute_metric_run``
runs it with the run directory, checkpoints and resume of ``trainer.run.runner``. The
leakage is written as metric figures (``metric_leakage_*`` in ``rounds.jsonl`` metrics
and the summary's ``final_metrics``, ``privacy_unit: metric_local``), never as
``epsilon_spent``, which stays empty: the notions never mix.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import torch

from accounting.errors import InvalidInputError
from trainer.run.checkpoint import load_checkpoint, save_checkpoint
from trainer.run.directory import RunDirectory, atomic_write_json, fingerprint
from trainer.run.divergence import Divergence
from trainer.run.metrics import RoundRecord, append_round, truncate_rounds
from trainer.run.plots import plot_run
from trainer.run.progress import Progress
from trainer.strategies.base import RoundContext
from trainer.units.metric.ledger import MetricLedger
from trainer.units.metric.rounds import MetricRoundEngine


def prepare_metric_run(
    plan: Any,
    plan_document: dict[str, Any],
    config: Any,
    out: Path,
    *,
    resume: bool = False,
    device: str = "auto",
    strategy_factory: Any = None,
    dataset: Any = None,
    engine_factory: Any = None,
    allow_tf32: bool = False,
) -> Any:
    """A validated metric run (``PreparedRun`` with the metric engine); nothing written yet.

    Float32 math as ``trainer.device.configure_float_math(allow_tf32)`` (docs/trainer.md
    §Reproducible GPU math).
    """
    from planner.units.metric_local import MetricPlan, verify_metric
    from trainer.device import choose_device, configure_float_math
    from trainer.engines import LocalTrainingConfig, num_params
    from trainer.run.mechanisms import METRIC_LAPLACE
    from trainer.run.runner import PreparedRun, build_population, build_run_model, load_run_data, registered_strategy

    if not isinstance(plan, MetricPlan):
        raise InvalidInputError("privacy_unit", f"the metric mechanism runs metric_local plans; this plan is {plan.privacy_unit!r}")
    if engine_factory is not None:
        raise InvalidInputError("engine", "metric_local plans run on the simulator's metric engine only")
    verify_metric(plan)
    if config.rounds > plan.rounds:
        raise InvalidInputError(
            "rounds", f"{config.rounds} exceeds the plan's {plan.rounds} rounds; running more would leak more than planned"
        )
    factory = strategy_factory or registered_strategy(config, plan)
    chosen_device = choose_device(device)
    configure_float_math(allow_tf32)
    local = LocalTrainingConfig(
        local_steps=config.local_steps, batch_size=config.batch_size, lr=config.lr, momentum=config.momentum
    )
    if dataset is None:
        dataset = load_run_data(config, plan.scenario.total_clients)
    model = build_run_model(config, dataset).to(chosen_device)
    if num_params(model) != plan.scenario.model_dim:
        raise InvalidInputError(
            "model_dim",
            f"the plan's model_dim is {plan.scenario.model_dim}, the model has {num_params(model)} parameters: "
            "the leakage n / nu is per model size; plan for this model",
        )
    population, _ = build_population(plan, dataset, config.seed)  # random assignment: no warnings

    def build_strategy(for_plan: Any) -> Any:
        return factory(
            for_plan, model, dataset, engine=config.engine, local=local, device=chosen_device,
            server_lr=config.server_lr, server_momentum=config.server_momentum,
        )

    strategy = build_strategy(plan)
    initial = strategy.initial_params()
    ledger = MetricLedger(plan)
    engine = MetricRoundEngine(plan, strategy, population, int(initial.numel()), ledger)
    return PreparedRun(
        # PreparedRun's fields are typed for client plans; the metric loop reads only common ones
        plan=plan,  # type: ignore[arg-type]
        plan_document=plan_document, config=config, run_dir=RunDirectory(out), resume=resume,
        dataset=dataset, model=model, device=chosen_device, population=population, initial_params=initial,
        strategy=strategy, engine=engine, warnings=list(plan.warnings), build_strategy=build_strategy,
        mechanism=METRIC_LAPLACE, run_start=0,
    )


def execute_metric_run(
    prepared: Any, *, reporter: Any = None, progress: Progress | None = None, epsilon_fn: Any = None, plan_id: str | None = None
) -> Any:
    """Run (or continue, ``prepared.resume``) a prepared metric run; write and return its summary."""
    from trainer.run.runner import RunSummary

    if reporter is not None:
        raise InvalidInputError("report-to", "metric_local runs are not reported to the service yet; train without --report-to")
    config, run_dir, engine = prepared.config, prepared.run_dir, prepared.engine
    ledger: MetricLedger = engine.ledger
    plan_print = fingerprint(prepared.plan_document)
    config_print = fingerprint(config.fingerprint_data())
    params: torch.Tensor = prepared.initial_params
    next_round = 0
    if prepared.resume and run_dir.has_checkpoint():
        state = load_checkpoint(run_dir.checkpoint)
        if state["plan_fingerprint"] != plan_print or state["config_fingerprint"] != config_print:
            raise InvalidInputError("resume", f"the checkpoint in {run_dir.root} belongs to another plan or configuration")
        next_round = int(state["next_round"])
        params = state["global_params"].to(prepared.device)
        prepared.strategy.load_state_dict(state["strategy"])
        ledger.load_state_dict(state["ledger"])
        engine.load_state_dict(state.get("mechanism", {"radius": prepared.plan.scenario.radius}))
        if ledger.rounds_run != next_round:
            raise InvalidInputError("resume", "the checkpoint's ledger and round index disagree")
    else:
        run_dir.root.mkdir(parents=True, exist_ok=True)
        atomic_write_json(run_dir.plan, prepared.plan_document)
        atomic_write_json(run_dir.config, prepared.mechanism.recorded_config(config))
    records = truncate_rounds(run_dir.rounds, next_round)
    display = progress or Progress(config.rounds, next_round)
    for warning in prepared.warnings:
        display.message(f"warning: {warning}")
    divergence: Divergence | None = None
    started = time.perf_counter()
    try:
        for index in range(next_round, config.rounds):
            tick = time.perf_counter()
            ctx = RoundContext(round_index=index, global_round=index, seed=config.seed)
            previous = params
            params, outcome = engine.run(ctx, params)
            ledger.record_round()
            last = index + 1 == config.rounds
            finite = bool(torch.isfinite(params).all())
            metrics: dict[str, float] = {}
            if finite and (last or (index + 1) % config.eval_every == 0):
                metrics = dict(prepared.strategy.evaluate(ctx, params, prepared.dataset) or {})
            metrics.update({f"metric_{name}": value for name, value in ledger.summary().items()})
            loss = next((v for k, v in metrics.items() if k.endswith("_loss")), None)
            accuracy = next((v for k, v in metrics.items() if k.endswith("_accuracy")), None)
            if not finite:
                divergence = Divergence(
                    round=index, reason="the hypotheses are not finite",
                    hint="lower the learning rate or nu; the released models carry noise nu * radius", kept_round=index,
                )
                params = previous
            record = RoundRecord(
                round=index, loss=loss, accuracy=accuracy, epsilon_spent={}, aborted_pools=[],
                sampled=outcome.sampled, survived=outcome.survived, dropped_before_masking=0, dropped_after_masking=0,
                seconds=time.perf_counter() - tick, timing=dict(outcome.timing), privacy_unit=ledger.privacy_unit,
                nonfinite_updates=outcome.nonfinite_updates, diverged=not finite,
                metrics={k: float(v) for k, v in metrics.items() if math.isfinite(v)},
            )
            append_round(run_dir.rounds, record)
            records.append(record)
            save_checkpoint(
                run_dir.checkpoint,
                {
                    "next_round": index + 1, "seed": config.seed, "global_params": params.detach().cpu().clone(),
                    "strategy": prepared.strategy.state_dict(), "ledger": ledger.state_dict(),
                    "mechanism": engine.state_dict(),
                    "plan_fingerprint": plan_print, "config_fingerprint": config_print,
                },
            )
            display.round_done(record)
            if divergence is not None:
                break
    finally:
        display.close()
    evaluated = [r for r in records if r.loss is not None]
    summary = RunSummary(
        run_dir=str(run_dir.root), method=prepared.plan.method, plan_id=plan_id, complete=ledger.rounds_run == config.rounds,
        rounds_run=ledger.rounds_run, rounds=config.rounds, start_round=0,
        final_accuracy=evaluated[-1].accuracy if evaluated else None, final_loss=evaluated[-1].loss if evaluated else None,
        best_accuracy=max((r.accuracy for r in evaluated if r.accuracy is not None), default=None),
        epsilon_spent={}, epsilon_target={}, aborted_rounds={}, model_dim=prepared.plan.scenario.model_dim,
        device=str(prepared.device), seconds=time.perf_counter() - started, diverged=divergence,
        warnings=list(prepared.warnings), privacy_unit=ledger.privacy_unit, notion=ledger.notion, strategy=config.strategy,
        final_metrics=records[-1].metrics if records else {},
        secagg_execution=prepared.mechanism.secagg_execution(config),
    )
    atomic_write_json(run_dir.summary, summary.model_dump(mode="json"))
    plot_run(
        records, run_dir.accuracy_plot, run_dir.loss_plot, prepared.plan.method, run_dir.local_accuracy_plot,
        privacy_path=run_dir.privacy_plot, notion=summary.notion,
    )
    return summary
