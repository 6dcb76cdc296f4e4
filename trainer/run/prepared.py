"""What a unit's preparation hands the run loop: ``PreparedRun``, and the one options object
every unit's ``prepare`` takes, ``RunOptions`` (docs/trainer.md §Layout).

``trainer.runner.prepare_run`` builds ``RunOptions`` once from its keywords and passes
it through to the plan's unit (``trainer.units.registry``), so a unit's preparation reads
the same fields by the same names.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch

from accounting.errors import InvalidInputError
from planner.ledger import EpsilonFigures
from planner.schema import Plan
from trainer.run.config import TrainConfig
from trainer.run.directory import RunDirectory
from trainer.run.outcome import RoundOutcome
from trainer.run.plots import ChanceLevel
from trainer.strategies.base import Population, RoundContext, Strategy

if TYPE_CHECKING:  # a unit's declaration names this module's types; it is read without torch
    from trainer.run.unit import TrainingUnit


class RunTally(Protocol):
    """What the run loop asks of a unit's tally (``TrainingUnit.tally``): count a round,
    say what was spent (under the unit's ``notion``) and checkpoint its state."""

    privacy_unit: str
    notion: str
    rounds_run: int

    def record_round(self) -> None: ...

    def spent(self) -> dict[str, float | None]: ...

    def final_spent(self) -> dict[str, float | None]: ...

    def final_figures(self) -> dict[str, EpsilonFigures | None]:
        """Each entity's rdp and tight epsilon beside the figure of record (docs/ledger.md §3);
        empty where the notion is not an epsilon (metric leakage)."""
        ...

    def targets(self) -> dict[str, float | None]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class RoundRunner(Protocol):
    """What the run loop drives: a unit's round engine (the simulator's ``RoundEngine``, the
    Flower scale-out's ``trainer.flower.engine.FlowerRoundEngine``, the silo and metric
    engines)."""

    dim: int

    def run(self, ctx: RoundContext, global_params: torch.Tensor) -> tuple[torch.Tensor, RoundOutcome]: ...


class EngineFactory(Protocol):
    """(plan, strategy, population, model dim, config, rounds) -> the round executor for that plan.

    ``verified``: what the unit's verification of this very plan composed and the engine's own
    checks read rather than compose again (``TrainingUnit.verify``; the client unit: each
    Skellam-priced group's full-run ledger, docs/ledger.md §5); ``None`` or a figure it lacks:
    the engine composes what it needs. The run's first engine gets its plan's (the client
    unit's ``checked_client_plan``), a followed re-plan's engine the successor's
    (``trainer.run.replan.switch_plan``)."""

    def __call__(self, plan: Plan, strategy: Strategy, population: Population, dim: int, config: TrainConfig,
                 rounds: int, /, *, verified: Mapping[str, float] | None = None) -> RoundRunner: ...


# An engine factory written for the release before ``verified=``: (plan, strategy, population,
# dim, config, rounds) only; still taken wherever an ``EngineFactory`` is (``as_engine_factory``)
PositionalEngineFactory = Callable[[Plan, Strategy, Population, int, TrainConfig, int], RoundRunner]


def as_engine_factory(factory: EngineFactory | PositionalEngineFactory) -> EngineFactory:
    """``factory`` called as an ``EngineFactory`` (docs/trainer.md §Runs, checkpoints and resume):
    ``factory`` itself when its signature takes ``verified=`` (a keyword of that name, or
    ``**kwargs``), otherwise one that calls it with the six positional arguments only, as the
    previous release did; a callable whose signature cannot be read gets nothing extra either.

    ``verified`` only spares an engine composing again what verification composed (``None``:
    it composes what it needs), so leaving it out costs time, never a privacy figure. Read once
    per factory, here, by every caller (``prepare_client_run``, ``switch_plan``)."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # a builtin or extension callable without a readable signature
        parameters = None
    if parameters is not None and any(
        parameter.kind is inspect.Parameter.VAR_KEYWORD
        or (parameter.name == "verified" and parameter.kind is not inspect.Parameter.POSITIONAL_ONLY)
        for parameter in parameters
    ):
        return cast(EngineFactory, factory)
    positional = cast(PositionalEngineFactory, factory)

    def without_verified(plan: Plan, strategy: Strategy, population: Population, dim: int, config: TrainConfig,
                         rounds: int, /, *, verified: Mapping[str, float] | None = None) -> RoundRunner:
        return positional(plan, strategy, population, dim, config, rounds)

    return without_verified


# (config, plan) -> a factory of the registry's strategy ``config.strategy``, its options
# validated and checked against the plan (``trainer.units.strategies.registered_strategy``).
StrategySelector = Callable[[TrainConfig, Any], Callable[..., Strategy]]


def no_strategy_registry(config: TrainConfig, plan: Any) -> Callable[..., Strategy]:
    """``RunOptions.select_strategy`` of options built without the registry: refuse."""
    raise InvalidInputError(
        "strategy", f"no strategy registry to select {config.strategy!r} from (prepare the run with "
        "trainer.runner.prepare_run, or give a strategy_factory)"
    )


@dataclass(frozen=True)
class RunOptions:
    """How to prepare a run besides its plan, config and directory (``prepare_run``'s keywords).

    ``strategy_factory(plan, model, dataset, **options)`` replaces the registry's strategy
    ``config.strategy``, which a unit otherwise selects with ``select_strategy`` (the
    registry sits above the units: ``prepare_run`` hands it down); ``dataset`` a pre-loaded
    dataset (tests); ``engine_factory`` the simulator's round engine (e.g. the Flower
    scale-out's; an ``EngineFactory``, or the previous release's ``PositionalEngineFactory``); ``silo_engine(dpsgd_engine)`` the DP-SGD engine a silo run's strategy
    calls, given the one built for the run (the Flower scale-out's runs each silo's pass on
    its node); float32 math is IEEE unless
    ``allow_tf32`` (docs/trainer.md §Reproducible GPU math).
    """

    resume: bool = False
    device: str = "auto"
    strategy_factory: Callable[..., Strategy] | None = None
    dataset: Any = None
    engine_factory: EngineFactory | PositionalEngineFactory | None = None
    allow_tf32: bool = False
    select_strategy: StrategySelector = no_strategy_registry
    silo_engine: Callable[[Any], Any] | None = None


@dataclass
class PreparedRun:
    """A validated run, ready to execute; nothing has been written yet."""

    plan: Any  # the plan document of the run's unit (planner.units)
    plan_document: dict[str, Any]
    config: TrainConfig
    run_dir: RunDirectory
    resume: bool
    dataset: Any
    model: torch.nn.Module
    device: torch.device
    population: Population
    initial_params: torch.Tensor
    strategy: Any  # the unit's strategy (a Strategy, or a silo unit's SiloStrategy)
    engine: RoundRunner
    warnings: list[str]
    build_strategy: Callable[[Any], Any]
    unit: TrainingUnit  # the plan's privacy unit in this trainer: its loop steps, tally, options
    # (plan, strategy, population, dim, config, rounds) -> the round engine; a re-plan rebuilds it
    # (with ``verified=`` where it takes it: as_engine_factory)
    engine_factory: EngineFactory | PositionalEngineFactory | None = None
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
