"""Training runs of ``metric_local`` plans: the ``metric_laplace`` mechanism (docs/metric-privacy.md §5),
whose entry in the trainer's unit registry is ``trainer.units.metric.unit.UNIT``.

``prepare_metric_run`` validates everything (the plan re-derived by its verifier, rounds
within the plan's, a model whose size is the plan's ``model_dim``, a strategy that
releases individual models) and builds the metric round engine; the one run loop
(``trainer.runner``) runs it with the metric phases (``trainer.units.metric.steps``):
the leakage is written as metric figures (``metric_leakage_*`` in ``rounds.jsonl`` metrics
and the summary's ``final_metrics``, ``privacy_unit: metric_local``), never as
``epsilon_spent``, which stays empty: the notions never mix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from accounting.errors import InvalidInputError
from planner.schema import PlanDocument
from planner.units.metric_local import MetricPlan, verify_metric
from trainer.device import choose_device, configure_float_math
from trainer.engines import LocalTrainingConfig, num_params
from trainer.run.config import TrainConfig
from trainer.run.directory import RunDirectory
from trainer.run.preparation import build_population, build_run_model, load_run_data
from trainer.run.prepared import PreparedRun, RunOptions
from trainer.run.unit import TrainingUnit
from trainer.strategies.base import Population
from trainer.units.metric.rounds import MetricRoundEngine
from trainer.units.metric.tally import MetricTally


def prepare_metric_run(unit: TrainingUnit, plan: PlanDocument, plan_document: dict[str, Any], config: TrainConfig, out: Path,
                       options: RunOptions) -> PreparedRun:
    """A validated metric run (``PreparedRun`` with the metric engine); nothing written yet.

    Float32 math as ``trainer.device.configure_float_math(allow_tf32)`` (docs/trainer.md
    §Reproducible GPU math).
    """
    if not isinstance(plan, MetricPlan):
        raise InvalidInputError("privacy_unit", f"the metric mechanism runs metric_local plans; this plan is {plan.privacy_unit!r}")
    if options.engine_factory is not None:
        raise InvalidInputError("engine", "metric_local plans run on the simulator's metric engine only")
    verify_metric(plan)
    if plan.start_round > 0:
        # a re-plan's caps count every release of the runs before it (docs/metric-privacy.md
        # §4), which the plan does not carry and a new run cannot know: it would start every
        # client at zero releases and let them release past their leakage budget
        raise InvalidInputError(
            "plan", f"this metric plan is a re-plan starting at round {plan.start_round}: its participation caps "
            "count the releases of the run before it, which a new run cannot know; continue that run instead "
            "(it follows the re-plan, or resume it with --resume)"
        )
    if config.rounds > plan.rounds:
        raise InvalidInputError(
            "rounds", f"{config.rounds} exceeds the plan's {plan.rounds} rounds; running more would leak more than planned"
        )
    factory = options.strategy_factory or options.select_strategy(config, plan)
    chosen_device = choose_device(options.device)
    configure_float_math(options.allow_tf32)
    local = LocalTrainingConfig(
        local_steps=config.local_steps, batch_size=config.batch_size, lr=config.lr, momentum=config.momentum
    )
    dataset = options.dataset if options.dataset is not None else load_run_data(config, plan.scenario.total_clients)
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
    tally = MetricTally(plan)

    def engine_factory(for_plan: Any, for_strategy: Any, for_population: Population, dim: int,
                       run_config: TrainConfig, rounds: int, *, verified: Any = None) -> MetricRoundEngine:
        # verified: nothing the metric verifier composes is read by its engine
        # one tally for the whole run: a re-plan the run follows moves the caps on it
        # (MetricTally.continued), the releases so far stay counted (docs/metric-privacy.md §4)
        return MetricRoundEngine(for_plan, for_strategy, for_population, dim, tally)

    engine = engine_factory(plan, strategy, population, int(initial.numel()), config, config.rounds)
    return PreparedRun(
        plan=plan,
        plan_document=plan_document, config=config, run_dir=RunDirectory(out), resume=options.resume,
        dataset=dataset, model=model, device=chosen_device, population=population, initial_params=initial,
        strategy=strategy, engine=engine, warnings=list(plan.warnings), build_strategy=build_strategy,
        engine_factory=engine_factory, unit=unit, run_start=plan.start_round,
    )
