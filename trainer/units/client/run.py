"""Preparing a client-level run (docs/trainer.md §Runs, checkpoints and resume); the
client unit's entry of the trainer's unit registry is ``trainer.units.client.unit.UNIT``.

``prepare_client_run`` validates the plan (re-derived by ``planner.verify``), the rounds,
data, model and strategy, all before anything is written, and builds the round engine:
the simulator's ``RoundEngine`` (``build_engine``) or the one ``RunOptions.engine_factory``
gives (the Flower scale-out's).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from accounting.errors import InvalidInputError
from planner.schema import Plan, PlanDocument, require_client_plan
from planner.verify import UnderstatedFigure, understated_warning, verify_executable
from trainer.device import choose_device, configure_float_math
from trainer.engines import LocalTrainingConfig, flatten_params, num_params
from trainer.run.config import TrainConfig
from trainer.run.directory import RunDirectory
from trainer.run.divergence import learnability_message
from trainer.run.preparation import build_population, build_run_model, load_run_data
from trainer.run.prepared import PreparedRun, RunOptions, as_engine_factory
from trainer.run.unit import TrainingUnit
from trainer.strategies.base import Population, Strategy
from trainer.units.client.adaptive_clip import adaptive_controller
from trainer.units.client.discrete import run_mechanism
from trainer.units.client.rounds import RoundEngine, full_mode_reasons
from trainer.units.client.strategies import STRATEGY_SPECS


def prepare_client_run(unit: TrainingUnit, plan: PlanDocument, plan_document: dict[str, Any], config: TrainConfig, out: Path,
                       options: RunOptions) -> PreparedRun:
    """Validate a client-level plan, config, data and model; build the strategy and round engine.

    Raises ``InvalidInputError`` for anything a user can fix: a plan that is inconsistent
    or overspends (``planner.verify``, docs/ledger.md §5), rounds beyond the plan's (that
    would spend more privacy than planned), a plan without rounds, unknown data, a model
    that does not fit the data, a population larger than the data can split into.
    ``options.strategy_factory(plan, model, dataset, **options)`` replaces the registry's
    strategy ``config.strategy`` (``options.select_strategy``: ``trainer.units.strategies``,
    options validated here).
    """
    client_plan, understated, skellam_spent = checked_client_plan(plan, config, unit.mechanism)
    # the mechanism the run executes, resolved once from the plan it starts on and recorded so
    # (config.json, the fingerprint, the tally): a re-plan it follows keeps it
    config = config.model_copy(update={"secagg_mechanism": run_mechanism(config.secagg_mechanism, client_plan)})
    factory = options.strategy_factory or options.select_strategy(config, client_plan)
    if options.strategy_factory is not None and (config.strategy != "plan" or config.strategy_options):
        raise InvalidInputError("strategy", "a strategy_factory replaces the config's strategy; give one, not both")
    device = choose_device(options.device)
    configure_float_math(options.allow_tf32)
    local = LocalTrainingConfig(
        local_steps=config.local_steps, batch_size=config.batch_size, lr=config.lr, momentum=config.momentum
    )
    dataset = options.dataset if options.dataset is not None else load_run_data(config, client_plan.scenario.total_clients)
    model = build_run_model(config, dataset).to(device)
    population, warnings = build_population(
        client_plan, dataset, config.seed, opt_out_assignment=config.opt_out_assignment, skewed_label=config.skewed_label
    )
    dim = num_params(model)
    learnability = plan_warnings(client_plan, config, dim, warnings)
    if understated and config.secagg_mechanism == client_plan.scenario.mechanism:
        # on the continuous shares the ledger counts the plan's phases, as CONTINUOUS_ON_DISCRETE_PLAN says
        warnings.append(understated_warning(understated))

    def build_strategy(for_plan: Plan) -> Strategy:
        return factory(
            for_plan, model, dataset, engine=config.engine, local=local, device=device,
            server_lr=config.server_lr, server_momentum=config.server_momentum,
        )

    strategy = build_strategy(client_plan)
    warnings.extend(strategy.run_warnings(dataset))
    if config.secagg_mechanism == "gaussian_continuous" and any(pool.discrete is not None for pool in client_plan.pools):
        warnings.append(CONTINUOUS_ON_DISCRETE_PLAN)
    unused = unused_adaptive_clip_warning(client_plan, strategy, None if options.strategy_factory else config.strategy)
    if unused:
        warnings.append(unused)
    # an engine factory (the Flower scale-out's) reads the mechanism from ``config`` as build_engine does;
    # the first engine, the simulator's or the factory's, checks client_plan's blocks with the ledgers
    # verification composed (a re-plan's engine gets its successor's, trainer.run.replan.switch_plan)
    # (one of the previous release, without verified=, composes the ledgers itself: as_engine_factory)
    engine_factory = as_engine_factory(options.engine_factory or build_engine)
    engine = engine_factory(client_plan, strategy, population, dim, config, config.rounds, verified=skellam_spent)
    return PreparedRun(
        plan=client_plan, plan_document=plan_document, config=config, run_dir=RunDirectory(out),
        resume=options.resume, dataset=dataset, model=model, device=device, population=population,
        initial_params=flatten_params(model).to(device), strategy=strategy,
        engine=engine, warnings=warnings,
        build_strategy=build_strategy, unit=unit, engine_factory=engine_factory, learnability=learnability,
        run_start=client_plan.start_round,
    )


# A plan with discrete blocks run on the continuous shares by request (--secagg-mechanism
# gaussian_continuous): allowed for comparison, and said.
CONTINUOUS_ON_DISCRETE_PLAN = (
    "the plan carries discrete blocks, but this run sends continuous Gaussian shares (--secagg-mechanism "
    "gaussian_continuous, for comparison): its guarantee is approximate (each client's rounding after the "
    "noise is not accounted) and its ledger counts the plan's continuous phases"
)


def checked_client_plan(plan: PlanDocument, config: TrainConfig,
                        mechanism: str) -> tuple[Plan, list[UnderstatedFigure], dict[str, float]]:
    """``plan`` as a client-level plan, verified (never trusted) and covering ``config.rounds``.

    A plan whose stated group figures are below what its discrete blocks spend (written by a
    release that stated the continuous Gaussian's figures) runs when the blocks meet every
    budget: the run's ledger counts its own mechanism's figures anyway; those figures are
    returned beside the plan, for the run's one warning (``planner.verify.understated_warning``,
    docs/ledger.md §5), and the full-run Skellam ledgers verification composed (``skellam_spent``)."""
    client_plan = require_client_plan(plan, f"the {mechanism} mechanism (client-level DP)")
    if client_plan.rounds < 1:
        raise InvalidInputError("plan", "the plan covers 0 rounds: nothing to train")
    # never trust a plan document: re-derive every mechanism and check every budget
    skellam_spent: dict[str, float] = {}
    understated = verify_executable(client_plan, understated="report", skellam_spent=skellam_spent)
    if config.rounds > client_plan.rounds:
        raise InvalidInputError(
            "rounds",
            f"{config.rounds} exceeds the plan's {client_plan.rounds} rounds; running more would spend "
            "more privacy than the plan allows (re-plan for more rounds)",
        )
    return client_plan, understated, skellam_spent


def plan_warnings(plan: Plan, config: TrainConfig, dim: int, warnings: list[str]) -> str:
    """Add to ``warnings`` what the run should know about the plan for a model of ``dim``
    parameters (another model_dim, an unlikely-to-learn noise level, sparse pools that run
    full mode); return the start-of-run learnability line."""
    if dim != plan.scenario.model_dim:
        warnings.append(
            f"the plan was made for model_dim {plan.scenario.model_dim}, the model has {dim} "
            "parameters: keep ratios apply as ratios, and the plan's predicted noise energy, "
            "noise-to-signal ratio and keep_ratio: auto choices assumed the other dimension"
        )
    learnability, unlikely = learnability_message(plan, dim)
    if unlikely:
        warnings.append(learnability)
    if config.secagg_mode == "sparse":
        fallbacks = full_mode_reasons(plan, "sparse")
        if fallbacks:
            warnings.append(
                "--secagg sparse: " + "; ".join(f"{pool} ({reason})" for pool, reason in fallbacks.items())
                + " run full mode, the only secure graph there (docs/secure-aggregation.md §Automatic mode)"
            )
    return learnability


def unused_adaptive_clip_warning(plan: Plan, strategy: Strategy, strategy_name: str | None) -> str | None:
    """The warning for a plan whose scenario has an ``adaptive_clip`` block run with fixed
    clipping (docs/trainer.md §Adaptive clipping): the block is not used, every client is
    clipped at the plan's ``C_g``, and how adaptive clipping is turned on (``strategy_name``
    the registry's strategy, ``None`` for one given in code). ``None`` when there is nothing
    to say.

    The privacy accounting stays sound: fixed clipping adds each pool's planned
    ``noise_multiplier`` ``z_eff`` times ``C_g`` to the update sum and releases no count, the
    Gaussian mechanism of multiplier ``z_eff`` that the ledger composes either way.
    """
    if plan.scenario.adaptive_clip is None or adaptive_controller(strategy) is not None:
        return None
    if strategy_name is None:
        how = "this strategy does not run it"
    else:
        takes = [name for name, spec in STRATEGY_SPECS.items() if "adaptive_clip" in spec.options.model_fields]
        how = ("turn it on with --strategy-option adaptive_clip=true" if strategy_name in takes
               else f"strategy {strategy_name} has none; {' and '.join(takes)} run it with --strategy-option adaptive_clip=true")
    return (
        "the plan's adaptive_clip block is not used: this run clips at the plan's fixed C (the noise is the "
        f"planned z_eff times C, as the ledger counts); {how}"
    )


def build_engine(plan: Plan, strategy: Strategy, population: Population, dim: int, config: TrainConfig,
                 rounds: int, *, verified: Mapping[str, float] | None = None) -> RoundEngine:
    """The simulator's round engine of ``plan`` (``trainer.run.prepared.EngineFactory``): ``verified``,
    group id -> the full-run Skellam ledger ``planner.verify`` composed for this very plan, which the
    check of a block an earlier calibration wrote reads (``RoundEngine``'s ``skellam_spent``)."""
    return RoundEngine(
        plan,
        strategy,
        population,
        dim,
        rounds=rounds,
        late_dropout_fraction=config.late_dropout_fraction,
        secagg_mode=config.secagg_mode,
        secagg_execution=config.secagg_execution,
        secagg_workers=None if config.secagg_workers == "auto" else config.secagg_workers,
        secagg_mechanism=config.secagg_mechanism,
        skellam_spent=verified,
    )
