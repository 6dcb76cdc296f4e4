"""A training run: prepare (validate everything), then execute round by round.

(docs/trainer.md §Runs, checkpoints and resume.) ``prepare_run`` loads the dataset,
builds the model, maps the plan's groups onto the dataset's clients and checks the plan's
mechanism, all before anything is written, so bad input leaves no trace on disk.
``execute_run`` then creates (or reopens) the run directory and, per round: runs the
round engine, adds the round to the privacy ledger, evaluates on schedule, appends the
round to ``rounds.jsonl``, writes the checkpoint, reports the round, and updates the
progress display. At the end (or when the plan's rounds are all done) it writes
``summary.json`` and the plots.

Resume: the checkpoint stores the index of the next round, the global parameters, the
strategy's state, the ledger and the reporter's queue; all randomness of round ``t`` is
derived from ``(seed, t)``. Log lines written after the last checkpoint are dropped and
their rounds re-run, so a resumed run ends with the same parameters, the same ledger and
the same log (up to wall-clock times) as an uninterrupted one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pydantic
import torch
from pydantic import BaseModel, Field

from accounting.errors import InvalidInputError, validation_error_line
from planner import ledger as plan_ledger
from planner.schema import Plan, PlanDocument
from trainer.run.checkpoint import load_checkpoint, save_checkpoint
from trainer.run.config import ADAPTIVE_CLIP_SIMULATOR_ONLY
from trainer.run.config import TrainConfig as TrainConfig  # re-exported: its home before issue 26
from trainer.run.directory import RunDirectory, atomic_write_json, fingerprint
from trainer.run.divergence import Divergence, divergence_hint, learnability_message
from trainer.run.mechanisms import GAUSSIAN_SECAGG, TrainingMechanism, mechanism_for
from trainer.run.metrics import RoundRecord, append_round, truncate_rounds
from trainer.run.plots import ChanceLevel, chance_level, plot_run
from trainer.run.progress import Progress
from trainer.run.reporting import RoundReporter
from trainer.strategies.base import Population, RoundContext, Strategy
from trainer.units.client.ledger import EpsilonFn, PrivacyLedger
from trainer.units.client.rounds import RoundEngine, RoundOutcome, full_mode_reasons


class RunSummary(BaseModel):
    """``summary.json``: where a run ended up."""

    run_dir: str
    method: str
    plan_id: str | None = Field(description="the service's plan the run ended on (it may have followed re-plans)")
    superseded_plans: list[str] = Field(
        default_factory=list, description="ids of the plans this run followed before plan_id, oldest first"
    )
    complete: bool
    rounds_run: int = Field(description="rounds this run completed")
    rounds: int = Field(description="rounds this run was asked for")
    start_round: int
    final_accuracy: float | None
    final_loss: float | None
    best_accuracy: float | None
    epsilon_spent: dict[str, float | None] = Field(
        description="group id -> epsilon spent over all phases, under the plan's accountant"
    )
    epsilon_target: dict[str, float | None] = Field(
        description="each group's budget, as the scenario of the plan the run ended on fixes it"
    )
    aborted_rounds: dict[str, int] = Field(description="pool id -> rounds it released nothing")
    model_dim: int
    device: str
    seconds: float = Field(description="wall-clock seconds of this process's rounds")
    reports_pending: int = 0
    notion: str = Field("client-level (epsilon, delta)-DP per group", description="the privacy notion of every epsilon here")
    diverged: Divergence | None = Field(
        None, description="set when a round left the model non-finite and the run stopped after it"
    )
    warnings: list[str] = Field(default_factory=list)
    privacy_unit: str = Field("client", description="the notion of epsilon_spent: client = client-level DP per group")
    strategy: str = Field("plan", description="the training strategy that ran")
    final_metrics: dict[str, float] = Field(
        default_factory=dict, description="the strategy's own evaluation at the last evaluated round"
    )
    accuracy_by_group: dict[str, float | None] | None = Field(
        None,
        description="group id -> mean over its clients of the global model's accuracy on each client's own test "
        "data, last evaluated round (null without local test data; docs/trainer.md §Evaluation)",
    )
    personal_accuracy_by_group: dict[str, float | None] | None = Field(
        None, description="group id -> the same for the clients' personal models (strategies that keep them)"
    )
    personal_accuracy: float | None = Field(
        None, description="mean over all clients of their personal model's accuracy on their own test data"
    )
    secagg_execution: str | None = Field(
        "protocol", description="protocol (real secure aggregation) or exact_sum; null: the run's mechanism uses none (silo and metric runs)"
    )
    gradient_path: str | None = Field(
        None, description="silo runs: the DP-SGD path that computed the clipped per-example gradient sums, ghost "
        "(ghost clipping) or torch.func (docs/mrmtl.md §4.1); null for other runs"
    )
    secagg_graphs: dict[str, list[str]] = Field(
        default_factory=dict, description="pool id -> the graphs its sessions ran (full, sparse k=.. t=..)"
    )
    secagg_full_reasons: dict[str, str] = Field(
        default_factory=dict,
        description="pool id -> why its sessions run full mode where SecAgg+ was asked for or weighed (no Harary "
        "graph meets the bounds; auto: SecAgg+ k=.. saves < 4x); the plan states the graph, not this",
    )
    secagg_workers: int | None = Field(
        None,
        description="the most processes a secure-aggregation session of this run could use (secagg_workers, or "
        "under auto the cores available; a session too small to pay runs in 1); null: no protocol ran "
        "(exact_sum, silo and metric runs)",
    )


class RoundRunner(Protocol):
    """What ``execute_run`` drives: the simulator's ``RoundEngine``, or another executor of the
    same round (the Flower scale-out's ``trainer.flower.engine.FlowerRoundEngine``)."""

    dim: int

    def run(self, ctx: RoundContext, global_params: torch.Tensor) -> tuple[torch.Tensor, RoundOutcome]: ...


# (plan, strategy, population, model dim, config, rounds) -> the round executor for that plan.
EngineFactory = Callable[[Plan, Strategy, Population, int, "TrainConfig", int], RoundRunner]


@dataclass
class PreparedRun:
    """A validated run, ready to execute; nothing has been written yet."""

    plan: Plan
    plan_document: dict[str, Any]
    config: TrainConfig
    run_dir: RunDirectory
    resume: bool
    dataset: Any
    model: torch.nn.Module
    device: torch.device
    population: Population
    initial_params: torch.Tensor
    strategy: Strategy
    engine: RoundRunner
    warnings: list[str]
    build_strategy: Callable[[Plan], Strategy]
    engine_factory: EngineFactory | None = None  # None: the simulator's RoundEngine (build_engine)
    mechanism: TrainingMechanism = GAUSSIAN_SECAGG  # how the plan's privacy unit is trained
    # params -> {"loss", "accuracy", ...}; None: the global model on the dataset's test set
    evaluator: Callable[[torch.Tensor], dict[str, float]] | None = None
    # the plots' chance line for an ``evaluator`` that is not the dataset's test set (a silo
    # run's per-silo models); None: ``chance_level`` of the dataset's test labels
    chance: ChanceLevel | None = None
    learnability: str = ""  # the start-of-run line on the plan's noise-to-signal ratio
    run_start: int = 0  # global index of the run's first round (its first plan's start_round)
    current_document: dict[str, Any] | None = None  # the plan now executed, once re-planned
    plan_history: list[str] = field(default_factory=list)  # ids of superseded plans followed
    gradient_path: str | None = None  # a DP-SGD run's DpSgdEngine.gradient_path, for its summary


def load_run_data(config: TrainConfig, total_clients: int) -> Any:
    """The run's dataset split into ``total_clients`` clients (``trainer.data.load_dataset``)."""
    from trainer.data import load_dataset

    return load_dataset(
        config.dataset, num_clients=total_clients, partition=config.partition, alpha=config.alpha, seed=config.seed,
        **config.dataset_options,
    )


def build_run_model(config: TrainConfig, dataset: Any) -> torch.nn.Module:
    """The run's model for ``dataset`` (on the CPU); bad options are ``InvalidInputError("model-option")``."""
    from trainer.models import build_model

    try:
        return build_model(config.model, dataset, seed=config.seed, **config.model_options)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, InvalidInputError):
            raise
        raise InvalidInputError("model-option", f"{config.model} cannot be built with {config.model_options}: {exc}") from None


def build_population(
    plan: Any, dataset: Any, seed: int, *, opt_out_assignment: str = "random", skewed_label: int = 7
) -> tuple[Population, list[str]]:
    """Deal the dataset's clients into the plan's groups (``trainer.data.assign_groups``),
    with warnings for the run; any plan whose ``groups`` have ``id`` and ``num_clients``
    (client and metric plans).

    ``skewed``: the groups that opted out in the scenario (``epsilon: null``; a
    ``dp_fedavg_all`` plan gives them an epsilon, but they are the same clients) are
    filled first with clients holding ``skewed_label``; when fewer clients hold it than
    those groups need, the rest are dealt at random and a warning says how many
    (docs/trainer.md §Clients and groups).
    """
    from trainer.data import assign_groups, clients_with_label

    first: list[int] = []
    candidates = None
    warnings: list[str] = []
    if opt_out_assignment == "skewed":
        opted_out = {g.id for g in plan.scenario.groups if g.epsilon is None}
        first = [index for index, g in enumerate(plan.groups) if g.id in opted_out]
        if not first:
            raise InvalidInputError("opt_out_assignment", "skewed needs a group that opted out (epsilon null)")
        candidates = clients_with_label(dataset, skewed_label)
        wanted = sum(plan.groups[index].num_clients for index in first)
        if 0 < candidates.size < wanted:
            warnings.append(
                f"skewed opt-out: only {candidates.size} clients hold label {skewed_label} but the opted-out "
                f"groups have {wanted}; the other {wanted - candidates.size} were dealt at random"
            )
    labels = np.asarray(
        assign_groups([g.num_clients for g in plan.groups], dataset.num_clients, seed, first=first, candidates=candidates)
    )
    population = Population({g.id: np.flatnonzero(labels == index) for index, g in enumerate(plan.groups)})
    return population, warnings


def accuracy_by_group(model: torch.nn.Module, params: torch.Tensor, dataset: Any,
                      population: Population) -> dict[str, float | None]:
    """Group id -> mean over the group's clients of ``params``' accuracy on each client's own
    test rows (``trainer.engines.evaluate_clients``; ``None`` for a group without any)."""
    from trainer.engines import evaluate_clients

    out: dict[str, float | None] = {}
    for group_id, clients in population.group_clients.items():
        out[group_id] = evaluate_clients(model, params, dataset, clients.tolist()).mean_accuracy() if clients.size else None
    return out


def prepare_run(
    plan: PlanDocument,
    plan_document: dict[str, Any],
    config: TrainConfig,
    out: Path,
    *,
    resume: bool = False,
    device: str = "auto",
    strategy_factory: Callable[..., Strategy] | None = None,
    dataset: Any = None,
    engine_factory: EngineFactory | None = None,
    allow_tf32: bool = False,
) -> PreparedRun:
    """Prepare a run with the training mechanism of the plan's privacy unit.

    (``trainer.run.mechanisms``; docs/architecture.md §Privacy units.) A unit without a
    mechanism in this trainer is refused by name (``InvalidInputError("privacy_unit")``).
    """
    prepare: Callable[..., PreparedRun] = mechanism_for(plan).prepare
    return prepare(
        plan, plan_document, config, out, resume=resume, device=device, strategy_factory=strategy_factory,
        dataset=dataset, engine_factory=engine_factory, allow_tf32=allow_tf32,
    )


def prepare_client_run(
    plan: PlanDocument,
    plan_document: dict[str, Any],
    config: TrainConfig,
    out: Path,
    *,
    resume: bool = False,
    device: str = "auto",
    strategy_factory: Callable[..., Strategy] | None = None,
    dataset: Any = None,
    engine_factory: EngineFactory | None = None,
    allow_tf32: bool = False,
) -> PreparedRun:
    """Validate a client-level plan, config, data and model; build the strategy and round engine.

    Raises ``InvalidInputError`` for anything a user can fix: a plan that is inconsistent
    or overspends (``planner.verify``, docs/ledger.md §5), rounds beyond the plan's (that
    would spend more privacy than planned), a plan without rounds, unknown data, a model
    that does not fit the data, a population larger than the data can split into.
    ``dataset`` may be passed pre-loaded (tests); ``strategy_factory(plan, model, dataset,
    **options)`` replaces the registry's strategy ``config.strategy``
    (``trainer.strategies.registry``, options validated here); ``engine_factory`` replaces the simulator's
    round engine (``build_engine``), e.g. with the Flower scale-out's. Float32 math is IEEE
    (no TF32) unless ``allow_tf32`` (``trainer.device.configure_float_math``, docs/trainer.md
    §Reproducible GPU math).
    """
    from planner.schema import require_client_plan
    from planner.verify import verify_executable
    from trainer.device import choose_device, configure_float_math
    from trainer.engines import LocalTrainingConfig, flatten_params, num_params

    plan = require_client_plan(plan, f"the {GAUSSIAN_SECAGG.name} mechanism (client-level DP)")
    if plan.rounds < 1:
        raise InvalidInputError("plan", "the plan covers 0 rounds: nothing to train")
    # never trust a plan document: re-derive every mechanism and check every budget
    verify_executable(plan)
    if config.rounds > plan.rounds:
        raise InvalidInputError(
            "rounds",
            f"{config.rounds} exceeds the plan's {plan.rounds} rounds; running more would spend "
            "more privacy than the plan allows (re-plan for more rounds)",
        )
    factory = strategy_factory or registered_strategy(config, plan)
    if strategy_factory is not None and (config.strategy != "plan" or config.strategy_options):
        raise InvalidInputError("strategy", "a strategy_factory replaces the config's strategy; give one, not both")
    chosen_device = choose_device(device)
    configure_float_math(allow_tf32)
    local = LocalTrainingConfig(
        local_steps=config.local_steps, batch_size=config.batch_size, lr=config.lr, momentum=config.momentum
    )
    if dataset is None:
        dataset = load_run_data(config, plan.scenario.total_clients)
    model = build_run_model(config, dataset).to(chosen_device)
    population, warnings = build_population(
        plan, dataset, config.seed, opt_out_assignment=config.opt_out_assignment, skewed_label=config.skewed_label
    )
    dim = num_params(model)
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

    def build_strategy(for_plan: Plan) -> Strategy:
        return factory(
            for_plan,
            model,
            dataset,
            engine=config.engine,
            local=local,
            device=chosen_device,
            server_lr=config.server_lr,
            server_momentum=config.server_momentum,
        )

    strategy = build_strategy(plan)
    warnings.extend(strategy.run_warnings(dataset))
    if engine_factory is not None and strategy.adaptive_clip is not None:
        raise InvalidInputError("strategy-option adaptive_clip", ADAPTIVE_CLIP_SIMULATOR_ONLY)
    unused = unused_adaptive_clip_warning(plan, strategy, None if strategy_factory else config.strategy,
                                          simulator=engine_factory is None)
    if unused:
        warnings.append(unused)
    engine = (engine_factory or build_engine)(plan, strategy, population, dim, config, config.rounds)
    initial = flatten_params(model).to(chosen_device)
    return PreparedRun(
        plan=plan,
        plan_document=plan_document,
        config=config,
        run_dir=RunDirectory(out),
        resume=resume,
        dataset=dataset,
        model=model,
        device=chosen_device,
        population=population,
        initial_params=initial,
        strategy=strategy,
        engine=engine,
        warnings=warnings,
        build_strategy=build_strategy,
        engine_factory=engine_factory,
        mechanism=GAUSSIAN_SECAGG,
        learnability=learnability,
        run_start=plan.start_round,
    )


def unused_adaptive_clip_warning(plan: Plan, strategy: Strategy, strategy_name: str | None, *,
                                 simulator: bool = True) -> str | None:
    """The warning for a plan whose scenario has an ``adaptive_clip`` block run with fixed
    clipping (docs/trainer.md §Adaptive clipping): the block is not used, every client is
    clipped at the plan's ``C_g``, and how adaptive clipping is turned on (``strategy_name``
    the registry's strategy, ``None`` for one given in code). ``None`` when there is nothing
    to say.

    The privacy accounting stays sound: fixed clipping adds each pool's planned
    ``noise_multiplier`` ``z_eff`` times ``C_g`` to the update sum and releases no count, the
    Gaussian mechanism of multiplier ``z_eff`` that the ledger composes either way.
    """
    if plan.scenario.adaptive_clip is None or strategy.adaptive_clip is not None:
        return None
    if not simulator:
        how = ADAPTIVE_CLIP_SIMULATOR_ONLY
    elif strategy_name is None:
        how = "this strategy does not run it"
    else:
        from trainer.strategies.registry import STRATEGIES

        takes = [name for name, spec in STRATEGIES.items() if "adaptive_clip" in spec.options.model_fields]
        how = ("turn it on with --strategy-option adaptive_clip=true" if strategy_name in takes
               else f"strategy {strategy_name} has none; {' and '.join(takes)} run it with --strategy-option adaptive_clip=true")
    return (
        "the plan's adaptive_clip block is not used: this run clips at the plan's fixed C (the noise is the "
        f"planned z_eff times C, as the ledger counts); {how}"
    )


def registered_strategy(config: TrainConfig, plan: PlanDocument) -> Callable[..., Strategy]:
    """A factory of the registry's strategy ``config.strategy`` with its options validated
    and checked against ``plan`` (``InvalidInputError`` naming the strategy or the option)."""
    from trainer.strategies.registry import strategy_spec

    spec = strategy_spec(config.strategy)
    options = spec.parse_options(config.strategy_options)
    spec.check_plan(plan)

    def factory(for_plan: Plan, model: Any, dataset: Any, **common: Any) -> Strategy:
        return spec.build(for_plan, options, model=model, dataset=dataset, **common)

    return factory


def build_engine(plan: Plan, strategy: Strategy, population: Population, dim: int, config: TrainConfig,
                 rounds: int) -> RoundEngine:
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
    )


def switch_plan(
    prepared: PreparedRun,
    ledger: PrivacyLedger,
    document: dict[str, Any],
    global_round: int,
    epsilon_fn: EpsilonFn | None = None,
    *,
    resuming: bool = False,
) -> PrivacyLedger:
    """Continue the run on ``document``, the service's re-plan, from ``global_round``.

    The successor is verified like any plan (``planner.verify``); it must start at
    ``global_round``, cover the run's remaining rounds, keep the population (same group
    ids and client counts: the simulator cannot re-deal clients mid-run), and its spent
    history must be exactly what this run's ledger spent so far (docs/ledger.md §6).
    The global parameters and the strategy's state carry over. Returns the new ledger.

    ``resuming``: ``document`` is the plan a checkpoint was executing and ``global_round``
    the next round to run. The run switched to it at its own ``start_round``, which must
    lie in this run's rounds up to ``global_round``, and is rebuilt as of that round (the
    round engine sized for the rounds from there, as the uninterrupted run built it); the
    spent history is checked when the checkpoint's ledger is loaded into the returned one
    (``PrivacyLedger.load_state_dict``), not here (docs/trainer.md §Runs, checkpoints and resume).
    """
    from planner.ledger import merge_phases
    from planner.schema import load_plan
    from planner.verify import verify_executable
    from trainer.run.reporting import ReportingStoppedError

    name = document.get("id", "the successor plan")
    try:
        # reading checks the fields its scenario fixes (planner.schema.check_scenario_fixed)
        successor = load_plan(document)
        verify_executable(successor)
    except (InvalidInputError, pydantic.ValidationError) as exc:
        if resuming:  # the checkpoint's own copy: damaged local input (exit 2), as its other checks
            raise
        message = exc.message if isinstance(exc, InvalidInputError) else validation_error_line(exc.errors())
        raise ReportingStoppedError(f"the re-plan {name} does not verify: {message}") from None
    current = prepared.plan
    end = prepared.run_start + prepared.config.rounds
    problems = []
    if resuming:
        if not prepared.run_start <= successor.start_round <= global_round:
            # a damaged checkpoint, not the service's doing: bad input (exit 2), as its other checks
            raise InvalidInputError(
                "resume", f"the checkpoint's plan {name} starts at round {successor.start_round}, outside this "
                f"run's rounds {prepared.run_start} to {global_round} (the checkpoint's next round)"
            )
        global_round = successor.start_round
    elif successor.start_round != global_round:
        problems.append(f"it starts at round {successor.start_round}, this run is at round {global_round}")
    if successor.start_round + successor.rounds < end:
        problems.append(f"it ends at round {successor.start_round + successor.rounds}, before this run's {end}")
    regrouped = [(g.id, g.num_clients) for g in successor.groups] != [(g.id, g.num_clients) for g in current.groups]
    if regrouped:
        problems.append("it changes the groups or their client counts (the simulator cannot re-deal clients mid-run)")
    elif not resuming:
        for group in successor.groups:
            mine = merge_phases(ledger.phases(group.id))
            theirs = merge_phases(plan_ledger.group_history(successor, group, 0))
            if not _same_phases(mine, theirs):
                problems.append(f"group {group.id}'s spent history {theirs} is not this run's {mine}")
                break
    if problems:
        # --resume meets the same re-plan at the same claim: when the population changed, the
        # way on is a new job on the re-plan, which the preflight accepts (its ledger counts
        # none of its own rounds yet); docs/ledger.md §6
        way_on = (
            f". --resume cannot continue this run; start a new job on the re-plan in a fresh directory: "
            f"gdpfed train --plan-id {name} --report-to (the same service) --out NEW_DIR (it trains from round "
            f"{successor.start_round} on a new model)" if regrouped and not resuming else ""
        )
        raise ReportingStoppedError(f"cannot follow the re-plan {name}: " + "; ".join(problems) + way_on)
    state = prepared.strategy.state_dict()
    strategy = prepared.build_strategy(successor)
    strategy.load_state_dict(state)
    engine = (prepared.engine_factory or build_engine)(
        successor, strategy, prepared.population, prepared.engine.dim, prepared.config, end - global_round
    )
    prepared.plan = successor
    prepared.current_document = document
    prepared.strategy = strategy
    prepared.engine = engine
    return prepared.mechanism.ledger(successor, epsilon_fn)


def _same_phases(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(
        x.steps == y.steps
        and math.isclose(x.sampling_rate, y.sampling_rate, rel_tol=1e-9)
        and math.isclose(x.noise_multiplier, y.noise_multiplier, rel_tol=1e-9)
        for x, y in zip(a, b)
    )


def round_record(
    outcome: RoundOutcome,
    ledger: PrivacyLedger,
    metrics: dict[str, float] | None,
    seconds: float,
    timing: dict[str, float],
    diverged: bool = False,
    strategy_metrics: dict[str, float] | None = None,
    accuracy_by_group: dict[str, float | None] | None = None,
) -> RoundRecord:
    return RoundRecord(
        round=outcome.global_round,
        loss=None if metrics is None else metrics["loss"],
        accuracy=None if metrics is None else metrics.get("accuracy"),
        epsilon_spent=ledger.spent(),
        privacy_unit=getattr(ledger, "privacy_unit", "client"),
        aborted_pools=outcome.aborted_pools,
        abort_reasons={pool: outcome.abort_reasons.get(pool, "aborted") for pool in outcome.aborted_pools},
        sampled=outcome.sampled,
        survived=outcome.survived,
        dropped_before_masking=outcome.dropped_before_masking,
        dropped_after_masking=outcome.dropped_after_masking,
        seconds=seconds,
        timing=timing,
        nonfinite_updates=outcome.nonfinite_updates,
        diverged=diverged,
        # the evaluator's further figures (silo runs: per-silo accuracies) and the strategy's own
        metrics={name: float(value) for name, value in (metrics or {}).items() if name not in ("loss", "accuracy")}
        | {name: float(value) for name, value in (strategy_metrics or {}).items()},
        accuracy_by_group=dict(accuracy_by_group or {}),
        secagg=outcome.secagg,
        clip_norm=outcome.clip_norm,
        unclipped_fraction=outcome.unclipped_fraction,
    )


def execute_run(
    prepared: PreparedRun,
    *,
    reporter: RoundReporter | None = None,
    progress: Progress | None = None,
    epsilon_fn: EpsilonFn | None = None,
    plan_id: str | None = None,
) -> RunSummary:
    """Run (or continue) the prepared run to its last round; return and write the summary.

    With a ``reporter`` (a trainer attached to the service, docs/ledger.md §6) each round
    is claimed before it runs and completed after; a claim answered with ``superseded``
    switches the run to the successor plan (``switch_plan``) before the round runs.

    A round that leaves the global parameters (or the test loss) non-finite is logged,
    accounted and reported like any other (it happened: its privacy is spent), then the
    run stops: the checkpoint keeps the parameters from before that round and records the
    divergence, so ``--resume`` delivers pending reports but trains no further, and the
    summary's ``diverged`` says where, why and what to change (docs/trainer.md §Divergence).
    """
    if prepared.mechanism.execute is not None:  # another unit's own loop (e.g. metric_local)
        summary: RunSummary = prepared.mechanism.execute(
            prepared, reporter=reporter, progress=progress, epsilon_fn=epsilon_fn, plan_id=plan_id
        )
        return summary
    from trainer.engines import evaluate
    from trainer.run.reporting import ReportingStoppedError

    config, run_dir = prepared.config, prepared.run_dir
    if reporter is not None and prepared.mechanism is not GAUSSIAN_SECAGG:
        raise InvalidInputError(
            "report-to", f"reporting rounds to the service is for client-level runs; this is a {prepared.mechanism.name} run"
        )
    plan_print = fingerprint(prepared.plan_document)
    config_print = fingerprint(config.fingerprint_data())
    ledger = prepared.mechanism.ledger(prepared.plan, epsilon_fn)
    params = prepared.initial_params
    next_round = 0
    divergence: Divergence | None = None
    kept_params = params  # the parameters the checkpoint keeps once the run diverged

    if prepared.resume and run_dir.has_checkpoint():
        state = load_checkpoint(run_dir.checkpoint)
        if state["plan_fingerprint"] != plan_print or state["config_fingerprint"] != config_print:
            raise InvalidInputError("resume", f"the checkpoint in {run_dir.root} belongs to another plan or configuration")
        next_round = int(state["next_round"])
        params = state["global_params"].to(prepared.device)
        prepared.strategy.load_state_dict(state["strategy"])
        if state.get("current_plan") is not None:
            # the run had followed a re-plan: continue on it from its own start round (verified
            # again, never trusted); a re-plan made while the run was down is followed at its claim
            prepared.plan_history = list(state.get("plan_history", []))
            ledger = switch_plan(prepared, ledger, state["current_plan"], prepared.run_start + next_round,
                                 epsilon_fn, resuming=True)
        ledger.load_state_dict(state["ledger"])
        if ledger.rounds_run != prepared.run_start + next_round - prepared.plan.start_round:
            raise InvalidInputError("resume", "the checkpoint's ledger and round index disagree")
        if reporter is not None:
            reporter.load_state_dict(state.get("reporter", {}))
        if state.get("diverged") is not None:
            divergence = Divergence.model_validate(state["diverged"])
            kept_params = params
    else:
        run_dir.root.mkdir(parents=True, exist_ok=True)
        atomic_write_json(run_dir.plan, prepared.plan_document)
        # the options the mechanism never reads are left out (a silo run's has no secure aggregation)
        atomic_write_json(run_dir.config, prepared.mechanism.recorded_config(config))
        if reporter is not None:
            atomic_write_json(run_dir.reporting, {"url": reporter.link.url, "plan_id": reporter.plan_id})
    records = truncate_rounds(run_dir.rounds, prepared.run_start + next_round)

    def checkpoint(rounds_done: int) -> None:
        save_checkpoint(
            run_dir.checkpoint,
            {
                "next_round": rounds_done,
                "seed": config.seed,
                "global_params": (params if divergence is None else kept_params).detach().cpu().clone(),
                "strategy": prepared.strategy.state_dict(),
                "ledger": ledger.state_dict(),
                "reporter": reporter.state_dict() if reporter is not None else {},
                "current_plan": prepared.current_document,
                "plan_history": list(prepared.plan_history),
                "plan_fingerprint": plan_print,
                "config_fingerprint": config_print,
                "diverged": None if divergence is None else divergence.model_dump(mode="json"),
            },
        )

    display = progress or Progress(prepared.run_start + config.rounds, prepared.run_start + next_round)
    if prepared.learnability and prepared.learnability not in prepared.warnings:
        display.message(prepared.learnability)
    for warning in prepared.warnings:
        display.message(f"warning: {warning}")
    started = time.perf_counter()
    try:
        # a resumed run that had diverged trains no further (it would diverge again)
        for local_round in range(next_round, config.rounds if divergence is None else next_round):
            global_round = prepared.run_start + local_round
            if reporter is not None:
                while (successor := reporter.claim(global_round)) is not None:
                    document = reporter.link.fetch_plan(successor.plan_id)
                    ledger = switch_plan(prepared, ledger, document, global_round, epsilon_fn)
                    prepared.plan_history.append(reporter.plan_id)
                    display.message(
                        f"plan {reporter.plan_id} was re-planned as {successor.plan_id} from round "
                        f"{successor.start_round}; continuing on it"
                    )
                    reporter.plan_id = successor.plan_id
            round_started = time.perf_counter()
            plan = prepared.plan
            ctx = RoundContext(round_index=global_round - plan.start_round, global_round=global_round,
                               seed=config.seed)
            previous = params
            params, outcome = prepared.engine.run(ctx, params)
            timing = dict(outcome.timing)

            tick = time.perf_counter()
            ledger.record_round()
            ledger.spent()
            timing["account"] = time.perf_counter() - tick

            metrics = None
            strategy_metrics = None
            local_accuracy: dict[str, float | None] = {}
            last = local_round + 1 == config.rounds
            finite = bool(torch.isfinite(params).all())
            if finite and (last or (local_round + 1) % config.eval_every == 0):
                tick = time.perf_counter()
                if prepared.evaluator is not None:
                    metrics = prepared.evaluator(params)
                else:
                    metrics = evaluate(prepared.model, params, prepared.dataset.test)
                    if prepared.dataset.has_client_tests:
                        local_accuracy = accuracy_by_group(prepared.model, params, prepared.dataset, prepared.population)
                    strategy_metrics = prepared.strategy.evaluate(ctx, params, prepared.dataset)
                timing["evaluate"] = time.perf_counter() - tick
            reason = None
            if not finite:
                reason = "the global parameters are not finite"
            elif metrics is not None and not math.isfinite(metrics["loss"]):
                reason = f"the test loss is {metrics['loss']}"
            if reason is not None:
                divergence = Divergence(
                    round=global_round,
                    reason=reason,
                    hint=divergence_hint(plan, config, prepared.engine.dim, outcome.nonfinite_updates)
                    if isinstance(plan, Plan) else f"lower --lr (now {config.lr:g}) or the plan's clip norm",
                    kept_round=global_round,
                )
                kept_params = previous

            record = round_record(
                outcome, ledger, metrics, time.perf_counter() - round_started, timing, diverged=reason is not None,
                strategy_metrics=strategy_metrics, accuracy_by_group=local_accuracy,
            )
            append_round(run_dir.rounds, record)
            records.append(record)
            # Report before the checkpoint so the checkpoint holds the queue after this
            # attempt; a crash in between re-runs the round: its claim and completion are
            # no-ops at the service.
            refused: ReportingStoppedError | None = None
            if reporter is not None:
                try:
                    reporter.complete(record.round, record.aborted_pools, report_metrics(record))
                except ReportingStoppedError as exc:
                    refused = exc
            if refused is not None or last or divergence is not None or (local_round + 1) % config.checkpoint_every == 0:
                checkpoint(local_round + 1)
            display.round_done(record)
            if refused is not None:
                raise refused
            if divergence is not None:
                display.message(f"diverged at round {divergence.round}: {divergence.reason}; stopping")
                break
        if reporter is not None and reporter.pending:
            reporter.flush()  # a finished run (or a resume of one) delivers what is pending
            if run_dir.has_checkpoint():
                checkpoint(prepared.plan.start_round + ledger.rounds_run - prepared.run_start)
    finally:
        display.close()

    summary = summarize(prepared, records, ledger, time.perf_counter() - started, plan_id, reporter, divergence)
    atomic_write_json(run_dir.summary, summary.model_dump(mode="json"))
    chance = prepared.chance
    if chance is None:
        chance = chance_level(getattr(prepared.dataset, "test_y", None), getattr(prepared.dataset, "task", ""))
    plot_run(
        records, run_dir.accuracy_plot, run_dir.loss_plot, prepared.plan.method, run_dir.local_accuracy_plot,
        chance=chance, privacy_path=run_dir.privacy_plot, budgets=summary.epsilon_target, notion=summary.notion,
    )
    return summary


def report_metrics(record: RoundRecord) -> dict[str, float]:
    """The ``metrics`` posted to the service for a round: a flat name -> finite number map.

    ``loss``/``accuracy`` on evaluated rounds, ``epsilon.<group>`` for private groups
    (names longer than the service's 64 characters are left out), client counts, seconds,
    and ``diverged: 1`` on the round that stopped a diverged run.
    """
    metrics: dict[str, float] = {
        "sampled": float(sum(record.sampled.values())),
        "survived": float(sum(record.survived.values())),
        "seconds": float(record.seconds),
    }
    if record.diverged:
        metrics["diverged"] = 1.0
    if record.loss is not None and math.isfinite(record.loss):
        metrics["loss"] = float(record.loss)
    if record.accuracy is not None:
        metrics["accuracy"] = float(record.accuracy)
    for group, value in record.accuracy_by_group.items():
        name = f"accuracy.{group}"
        if value is not None and len(name) <= 64 and len(metrics) < 256:
            metrics[name] = float(value)
    for group, spent in record.epsilon_spent.items():
        name = f"epsilon.{group}"
        if spent is not None and math.isfinite(spent) and len(name) <= 64 and len(metrics) < 256:
            metrics[name] = float(spent)
    for name, value in record.metrics.items():  # the strategy's own; never over the above
        if name not in metrics and math.isfinite(value) and len(name) <= 64 and len(metrics) < 256:
            metrics[name] = float(value)
    return metrics


def summarize(
    prepared: PreparedRun,
    records: list[RoundRecord],
    ledger: PrivacyLedger,
    seconds: float,
    plan_id: str | None,
    reporter: RoundReporter | None,
    divergence: Divergence | None = None,
) -> RunSummary:
    plan = prepared.plan
    evaluated = [r for r in records if r.loss is not None]
    pool_ids = [pool.id for pool in getattr(plan, "pools", [])]
    pool_ids += sorted({p for r in records for p in r.aborted_pools} - set(pool_ids))
    aborted = {pool_id: sum(pool_id in r.aborted_pools for r in records) for pool_id in pool_ids}
    rounds_run = prepared.plan.start_round + ledger.rounds_run - prepared.run_start
    return RunSummary(
        run_dir=str(prepared.run_dir.root),
        method=plan.method,
        plan_id=reporter.plan_id if reporter is not None else plan_id,
        superseded_plans=list(prepared.plan_history),
        complete=rounds_run == prepared.config.rounds and divergence is None,
        rounds_run=rounds_run,
        rounds=prepared.config.rounds,
        start_round=prepared.run_start,
        final_accuracy=evaluated[-1].accuracy if evaluated else None,
        final_loss=evaluated[-1].loss if evaluated else None,
        best_accuracy=max((r.accuracy for r in evaluated if r.accuracy is not None), default=None),
        epsilon_spent=ledger.final_spent(),
        epsilon_target=ledger.targets(),
        notion=getattr(ledger, "notion", "client-level (epsilon, delta)-DP per group"),
        aborted_rounds=aborted,
        model_dim=prepared.engine.dim,
        device=str(prepared.device),
        seconds=seconds,
        reports_pending=len(reporter.pending) if reporter is not None else 0,
        diverged=divergence,
        warnings=prepared.warnings,
        privacy_unit=plan.privacy_unit,
        strategy=prepared.config.strategy,
        final_metrics=evaluated[-1].metrics if evaluated else {},
        **personal_fields(evaluated[-1] if evaluated else None),
        secagg_execution=prepared.mechanism.secagg_execution(prepared.config),
        gradient_path=prepared.gradient_path,
        secagg_graphs={
            pool_id: list(dict.fromkeys(r.secagg[pool_id] for r in records if pool_id in r.secagg))
            for pool_id in pool_ids
        },
        secagg_workers=getattr(prepared.engine, "secagg_processes", None),
        secagg_full_reasons=full_mode_reasons(plan, prepared.config.secagg_mode) if isinstance(plan, Plan)
        and prepared.mechanism.secagg_execution(prepared.config) is not None else {},
    )


def personal_fields(record: RoundRecord | None) -> dict[str, Any]:
    """The summary's by-group and personal accuracies from the last evaluated round.

    ``accuracy_by_group`` is the run's own evaluation (``RoundRecord.accuracy_by_group``);
    the personal ones are the strategy's metrics named ``personal_accuracy`` and
    ``personal_accuracy.<group id>`` (``Strategy.evaluate``'s convention for strategies
    with personal models, docs/trainer.md §Strategies).
    """
    if record is None:
        return {}
    prefix = "personal_accuracy."
    personal = {name[len(prefix):]: value for name, value in record.metrics.items() if name.startswith(prefix)}
    return {
        "accuracy_by_group": dict(record.accuracy_by_group) or None,
        "personal_accuracy_by_group": personal or None,
        "personal_accuracy": record.metrics.get("personal_accuracy"),
    }
