"""Following the service's re-plan mid-run (docs/ledger.md §6; docs/trainer.md §Runs,
checkpoints and resume): ``switch_plan`` checks the successor and rebuilds the run on it."""

from __future__ import annotations

import math
from typing import Any

import pydantic

from accounting.errors import InvalidInputError, validation_error_line
from planner import ledger as plan_ledger
from planner.ledger import EpsilonFn, merge_phases
from planner.schema import Plan
from planner.units import load_plan
from planner.verify import verify_executable
from trainer.run.prepared import PreparedRun, RunTally
from trainer.run.reporting import ReportingStoppedError


def switch_plan(
    prepared: PreparedRun,
    ledger: Any,  # the run's ledger, with the groups' spent phases (the client unit's ClientTally)
    document: dict[str, Any],
    global_round: int,
    epsilon_fn: EpsilonFn | None = None,
    *,
    resuming: bool = False,
) -> RunTally:
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
    (``ClientTally.load_state_dict``), not here (docs/trainer.md §Runs, checkpoints and resume).
    """
    name = document.get("id", "the successor plan")
    successor = verified_successor(document, name, resuming)
    end = prepared.run_start + prepared.config.rounds
    if resuming:
        if not prepared.run_start <= successor.start_round <= global_round:
            # a damaged checkpoint, not the service's doing: bad input (exit 2), as its other checks
            raise InvalidInputError(
                "resume", f"the checkpoint's plan {name} starts at round {successor.start_round}, outside this "
                f"run's rounds {prepared.run_start} to {global_round} (the checkpoint's next round)"
            )
        global_round = successor.start_round
    refuse_successor(prepared, ledger, successor, name, global_round, resuming=resuming)
    state = prepared.strategy.state_dict()
    strategy = prepared.build_strategy(successor)
    strategy.load_state_dict(state)
    assert prepared.engine_factory is not None  # a unit that can be re-planned rebuilds its engine
    engine = prepared.engine_factory(
        successor, strategy, prepared.population, prepared.engine.dim, prepared.config, end - global_round
    )
    prepared.plan = successor
    prepared.current_document = document
    prepared.strategy = strategy
    prepared.engine = engine
    return prepared.unit.tally(successor, epsilon_fn)


def _same_phases(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(
        x.steps == y.steps
        and math.isclose(x.sampling_rate, y.sampling_rate, rel_tol=1e-9)
        and math.isclose(x.noise_multiplier, y.noise_multiplier, rel_tol=1e-9)
        for x, y in zip(a, b)
    )


def verified_successor(document: dict[str, Any], name: str, resuming: bool) -> Plan:
    """``document`` read and verified (``planner.verify``); a re-plan that does not verify
    stops the run (``ReportingStoppedError``), a checkpoint's own copy is bad input."""
    try:
        # reading checks the fields its scenario fixes (planner.schema.check_scenario_fixed)
        successor = load_plan(document)
        verify_executable(successor)
    except (InvalidInputError, pydantic.ValidationError) as exc:
        if resuming:  # the checkpoint's own copy: damaged local input (exit 2), as its other checks
            raise
        message = exc.message if isinstance(exc, InvalidInputError) else validation_error_line(exc.errors())
        raise ReportingStoppedError(f"the re-plan {name} does not verify: {message}") from None
    return successor


def refuse_successor(prepared: PreparedRun, ledger: Any, successor: Plan, name: str, global_round: int, *,
                     resuming: bool) -> None:
    """``ReportingStoppedError`` listing why the run cannot follow ``successor`` from
    ``global_round``: another start round, an earlier end, other groups, another spent history."""
    end = prepared.run_start + prepared.config.rounds
    problems = []
    if not resuming and successor.start_round != global_round:
        problems.append(f"it starts at round {successor.start_round}, this run is at round {global_round}")
    if successor.start_round + successor.rounds < end:
        problems.append(f"it ends at round {successor.start_round + successor.rounds}, before this run's {end}")
    current = prepared.plan
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
