"""``TrainingUnit``: what the trainer knows of one privacy unit, the only place the run loop,
the command line and the experiment runner ask about a unit (docs/trainer.md §Layout).

A unit lives in ``trainer/units/<unit>/``; its ``unit.py`` defines ``UNIT`` and
``trainer.units.registry`` has one line per unit. This module and each ``unit.py`` load
without torch: ``gdpfed train`` refuses an option the plan's unit never reads before it
imports the trainer (start-up time, docs/trainer.md §Layout), so a unit's preparation and
steps are imported when first used. The loop (``trainer.runner``) reads
the unit's attributes and calls its ``steps`` (``trainer.run.steps.RoundSteps``): it
never branches on a unit's name or type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.run.config import TrainConfig

if TYPE_CHECKING:  # start-up time: these import torch, which a unit's declaration must not
    from trainer.run.prepared import PreparedRun, RunOptions, RunTally
    from trainer.run.steps import RoundSteps
    from trainer.strategies.base import StrategySpec

# (the unit, plan, plan document, config, run directory, options) -> the validated run of
# that unit; nothing written
Prepare = Callable[["TrainingUnit", Any, dict[str, Any], TrainConfig, Path, "RunOptions"], "PreparedRun"]


@dataclass(frozen=True)
class TrainingUnit:
    """One entry of the trainer's unit registry.

    ``name``: the planner's unit (``planner.units``) whose plans this runs; ``mechanism``:
    the planner unit's mechanism name, which this trainer implements. ``prepare`` validates
    everything and builds the run (data, model, population, strategy, round engine);
    ``tally(plan, epsilon_fn)`` counts what its rounds released, which the ledger prices
    (``planner.ledger``, docs/architecture.md §Vocabulary); ``steps`` (built once by
    ``make_steps``) are its steps of the one run loop. Its strategies are named once, in
    its own ``strategies`` package; ``strategies()`` returns those ``--strategy`` selects
    (its ``STRATEGY_SPECS``; ``None``: none, as a silo plan's method names its strategy),
    which ``trainer.units.strategies.STRATEGIES`` gathers. ``unused_options``: the
    ``TrainConfig`` fields it never reads (``gdpfed train`` refuses them when given,
    ``unused_reason`` says why; config.json leaves them out). ``reports``: its rounds can be reported to the service (``--report-to``);
    otherwise ``no_reports_reason`` is the refusal. ``reports_participants``: its round
    reports carry the round's participants (``participants``; the metric unit's service
    ledger counts each client's releases, docs/ledger.md §8). ``follows_replans``: a run
    switches to the service's re-plan at a claim answered ``superseded`` (its ledger is then
    a ``trainer.run.replan.FollowingTally``, and its preparation gives the run an
    ``engine_factory``); otherwise that answer stops the run naming the re-plan
    (docs/ledger.md §6). ``verify(plan)``: the check of a re-plan the run follows, the planner
    unit's verifier's (``planner.units.verify``), returning what it composed for the successor's
    round engine (``EngineFactory``'s ``verified``: the client unit's full-run Skellam ledgers);
    ``None``: ``planner.units.verify``, nothing handed over.
    """

    name: str
    mechanism: str
    summary: str
    prepare: Prepare
    tally: Callable[..., RunTally]
    make_steps: Callable[[], RoundSteps]
    strategies: Callable[[], Mapping[str, StrategySpec]] | None = None
    unused_options: tuple[str, ...] = ()
    unused_reason: str = ""
    reports: bool = False
    no_reports_reason: str = ""
    reports_participants: bool = False
    follows_replans: bool = False
    verify: Callable[[Any], Mapping[str, float]] | None = None

    @cached_property
    def steps(self) -> RoundSteps:
        """The unit's steps of the run loop (``trainer.run.steps.RoundSteps``)."""
        return self.make_steps()

    def recorded_config(self, config: TrainConfig) -> dict[str, Any]:
        """The run's ``config.json``: ``config`` without the options this unit never reads."""
        return dict(config.model_dump(mode="json", exclude=set(self.unused_options)))

    def secagg_execution(self, config: TrainConfig) -> str | None:
        """The summary's ``secagg_execution``: ``config``'s, or ``None`` for a unit that runs
        no secure aggregation (it never reads the option)."""
        return None if "secagg_execution" in self.unused_options else str(config.secagg_execution)

    def participants(self, outcome: Any) -> dict[str, list[int]] | None:
        """What the round's report carries as ``participants`` (group id -> the clients that
        released in the round, ``outcome.participants``); ``None`` for a unit that reports none."""
        if not self.reports_participants:
            return None
        return {group: list(clients) for group, clients in (outcome.participants or {}).items()}

    def reported_mechanism(self, config: TrainConfig) -> str | None:
        """The ``secagg_mechanism`` this unit's round reports state: ``config``'s, the noise its
        secure aggregation executes and its tally counts, which the service's ledger counts the
        rounds as (docs/ledger.md §3); ``None`` for a unit that never reads the option."""
        return None if "secagg_mechanism" in self.unused_options else str(config.secagg_mechanism)

    def reporting_refusal(self, config: TrainConfig | None = None) -> str | None:
        """Why ``--report-to`` is refused for this unit's runs (of ``config``); ``None`` when its
        rounds are reported. Every mechanism of a reporting unit is: the reports state it
        (``reported_mechanism``) and the service's ledger counts it (docs/service.md §Privacy ledger)."""
        del config  # every secure-aggregation mechanism is reported
        if self.reports:
            return None
        return self.no_reports_reason or (
            f"reporting rounds to the service is for client-level runs; this is a {self.mechanism} run"
        )
