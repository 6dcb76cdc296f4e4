"""Following the service's re-plan mid-run (docs/ledger.md §6; docs/trainer.md §Runs,
checkpoints and resume): ``switch_plan`` checks the successor and rebuilds the run on it.

One path for every unit that follows re-plans (``TrainingUnit.follows_replans``: client,
silo, metric). What differs per unit is asked of the run's tally
(``FollowingTally``): the plan's population, whether the successor's record of what was
spent before it is what the run counted, and the tally that continues on the successor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import pydantic

from accounting.errors import InvalidInputError, validation_error_line
from planner.ledger import EpsilonFn
from planner.units import load_plan_document, verify
from trainer.run.prepared import PreparedRun, RunTally, as_engine_factory
from trainer.run.reporting import ReportingStoppedError


class FollowingTally(RunTally, Protocol):
    """What ``switch_plan`` asks of the tally of a unit whose runs follow re-plans."""

    # why a successor with another ``population`` cannot be followed, in the unit's words
    population_change: str

    def population(self, plan: Any) -> list[tuple[str, int]]:
        """``plan``'s protected entities, each with its size (a group's clients, a silo's
        examples): what a run cannot change mid-run (its data is dealt)."""
        ...

    def history_problem(self, successor: Any) -> str | None:
        """Why ``successor`` cannot continue what this tally counted (its record of what was
        spent before it is another history; a mechanism the spent figures depend on changed);
        ``None``: it can."""
        ...

    def continued(self, successor: Any, epsilon_fn: EpsilonFn | None) -> RunTally:
        """The tally counting ``successor``'s rounds from its start, what this one counted
        being what was spent before it (nothing counted twice, nothing lost)."""
        ...


def switch_plan(
    prepared: PreparedRun,
    tally: Any,  # the run's tally (a FollowingTally: the unit follows re-plans)
    document: dict[str, Any],
    global_round: int,
    epsilon_fn: EpsilonFn | None = None,
    *,
    resuming: bool = False,
) -> RunTally:
    """Continue the run on ``document``, the service's re-plan, from ``global_round``.

    The successor is verified like any plan of its unit (``planner.units.verify``) and must
    be of the run's unit; it must start at ``global_round``, cover the run's remaining
    rounds, keep the population (``FollowingTally.population``: the simulator cannot
    re-deal clients or examples mid-run), and continue what this run's tally counted
    (``FollowingTally.history_problem``: a client group's or a silo's spent history, a
    metric group's noise and every client's releases within the new cap; docs/ledger.md
    §6-§8). The global parameters, the strategy's state and the unit's further checkpoint
    state (``RoundSteps.saved_state``: a metric run's radius) carry over. Returns the
    tally that continues on the successor (``FollowingTally.continued``).

    ``resuming``: ``document`` is the plan a checkpoint was executing and ``global_round``
    the next round to run. The run switched to it at its own ``start_round``, which must
    lie in this run's rounds up to ``global_round``, and is rebuilt as of that round (the
    round engine sized for the rounds from there, as the uninterrupted run built it); the
    spent history is checked when the checkpoint's ledger is loaded into the returned one
    (its ``load_state_dict``), not here (docs/trainer.md §Runs, checkpoints and resume).
    """
    name = document.get("id", "the successor plan")
    successor, verified = verified_successor(document, name, resuming, prepared.plan.privacy_unit, prepared.unit.verify)
    end = prepared.run_start + prepared.config.rounds
    if resuming:
        if not prepared.run_start <= successor.start_round <= global_round:
            # a damaged checkpoint, not the service's doing: bad input (exit 2), as its other checks
            raise InvalidInputError(
                "resume", f"the checkpoint's plan {name} starts at round {successor.start_round}, outside this "
                f"run's rounds {prepared.run_start} to {global_round} (the checkpoint's next round)"
            )
        global_round = successor.start_round
    refuse_successor(prepared, tally, successor, name, global_round, resuming=resuming)
    state = prepared.strategy.state_dict()
    carried = prepared.unit.steps.saved_state(prepared)
    strategy = prepared.build_strategy(successor)
    strategy.load_state_dict(state)
    continued = tally.continued(successor, epsilon_fn)
    assert prepared.engine_factory is not None  # a unit that can be re-planned rebuilds its engine
    # the figures the successor's verification composed, which its engine's checks read (docs/ledger.md §5);
    # a factory without verified= (the previous release's) composes them itself
    engine = as_engine_factory(prepared.engine_factory)(
        successor, strategy, prepared.population, prepared.engine.dim, prepared.config, end - global_round,
        verified=verified,
    )
    prepared.plan = successor
    prepared.current_document = document
    prepared.strategy = strategy
    prepared.engine = engine
    prepared.unit.steps.load_state(prepared, carried)
    return continued


def verified_successor(document: dict[str, Any], name: str, resuming: bool, privacy_unit: str,
                       unit_verify: Callable[[Any], Mapping[str, float]] | None = None) -> tuple[Any, Mapping[str, float]]:
    """``document`` read and verified by its unit (``unit_verify``, the run's ``TrainingUnit.verify``,
    else ``planner.units.verify``) and of the run's ``privacy_unit``, with what the verification
    composed for its round engine (empty without ``unit_verify``); a re-plan that does not verify
    stops the run (``ReportingStoppedError``), a checkpoint's own copy is bad input (docs/ledger.md
    §5, §6)."""
    try:
        # reading checks the fields its scenario fixes (planner.schema.check_scenario_fixed)
        successor = load_plan_document(document)
        if successor.privacy_unit != privacy_unit:
            raise InvalidInputError(
                "privacy_unit", f"is {successor.privacy_unit!r}, but this run executes {privacy_unit!r} plans"
            )
        verified: Mapping[str, float] = {}
        if unit_verify is not None:
            verified = unit_verify(successor)
        else:
            verify(successor)
    except (InvalidInputError, pydantic.ValidationError) as exc:
        if resuming:  # the checkpoint's own copy: damaged local input (exit 2), as its other checks
            raise
        message = exc.message if isinstance(exc, InvalidInputError) else validation_error_line(exc.errors())
        raise ReportingStoppedError(f"the re-plan {name} does not verify: {message}") from None
    return successor, verified


def refuse_successor(prepared: PreparedRun, tally: Any, successor: Any, name: str, global_round: int, *,
                     resuming: bool) -> None:
    """``ReportingStoppedError`` listing why the run cannot follow ``successor`` from
    ``global_round``: another start round, an earlier end, another population, another
    spent history (``FollowingTally``)."""
    end = prepared.run_start + prepared.config.rounds
    problems = []
    if not resuming and successor.start_round != global_round:
        problems.append(f"it starts at round {successor.start_round}, this run is at round {global_round}")
    if successor.start_round + successor.rounds < end:
        problems.append(f"it ends at round {successor.start_round + successor.rounds}, before this run's {end}")
    regrouped = tally.population(successor) != tally.population(prepared.plan)
    if regrouped:
        problems.append(tally.population_change)
    elif not resuming:
        problem = tally.history_problem(successor)
        if problem is not None:
            problems.append(problem)
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
