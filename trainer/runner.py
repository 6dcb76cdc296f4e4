"""A training run: prepare (validate everything), then execute round by round, one loop for
every privacy unit.

(docs/trainer.md §Runs, checkpoints and resume; §Layout.) ``prepare_run`` hands the plan
to its unit (``trainer.units.registry.unit_for``), whose preparation loads the dataset,
builds the model, maps the plan's groups onto the dataset's clients and checks the plan's
mechanism, all before anything is written, so bad input leaves no trace on disk.
``execute_run`` then creates (or reopens) the run directory and, per round: runs the
round engine, counts the round in the run's tally (priced by the ledger), evaluates on schedule, appends the
round to ``rounds.jsonl``, writes the checkpoint, reports the round, and updates the
progress display. At the end (or when the plan's rounds are all done) it writes
``summary.json`` and the plots. What differs between units is the unit's ``steps``
(``trainer.run.steps.RoundSteps``), never a branch here.

Resume: the checkpoint stores the index of the next round, the global parameters, the
strategy's state, the tally and the reporter's queue; all randomness of round ``t`` is
derived from ``(seed, t)``. Log lines written after the last checkpoint are dropped and
their rounds re-run, so a resumed run ends with the same parameters, the same tally and
the same log (up to wall-clock times) as an uninterrupted one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from accounting.errors import InvalidInputError
from planner.ledger import EpsilonFn
from planner.schema import PlanDocument
from trainer.run.checkpoint import load_checkpoint, save_checkpoint
from trainer.run.config import TrainConfig as TrainConfig  # re-exported: its home before issue 26
from trainer.run.directory import atomic_write_json, fingerprint
from trainer.run.divergence import Divergence
from trainer.run.metrics import RoundRecord, append_round, truncate_rounds
from trainer.run.prepared import EngineFactory, PositionalEngineFactory, PreparedRun, RunOptions, RunTally
from trainer.run.progress import Progress
from trainer.run.records import report_metrics
from trainer.run.replan import switch_plan
from trainer.run.reporting import ReportingStoppedError, RoundReporter, write_reporting
from trainer.run.summary import RunSummary
from trainer.strategies.base import RoundContext, Strategy
from trainer.units.registry import unit_for
from trainer.units.strategies import registered_strategy


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
    engine_factory: EngineFactory | PositionalEngineFactory | None = None,
    allow_tf32: bool = False,
    silo_engine: Callable[[Any], Any] | None = None,
) -> PreparedRun:
    """Prepare a run of ``plan`` with its privacy unit's preparation (``trainer.units.registry``;
    docs/architecture.md §Privacy units); the keywords are ``RunOptions``' fields, and its
    ``select_strategy`` is the strategy registry's ``registered_strategy``. A unit
    without an entry in this trainer is refused by name (``InvalidInputError("privacy_unit")``).
    """
    options = RunOptions(resume=resume, device=device, strategy_factory=strategy_factory, dataset=dataset,
                         engine_factory=engine_factory, allow_tf32=allow_tf32, select_strategy=registered_strategy,
                         silo_engine=silo_engine)
    unit = unit_for(plan)
    return unit.prepare(unit, plan, plan_document, config, out, options)


@dataclass
class LoopState:
    """What the run loop carries from round to round."""

    prepared: PreparedRun
    tally: RunTally
    params: torch.Tensor
    reporter: RoundReporter | None
    epsilon_fn: EpsilonFn | None
    plan_print: str
    config_print: str
    next_round: int = 0
    divergence: Divergence | None = None
    kept_params: torch.Tensor | None = None  # the parameters the checkpoint keeps once the run diverged
    records: list[RoundRecord] = field(default_factory=list)


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
    refusal = prepared.unit.reporting_refusal(prepared.config)
    if reporter is not None and refusal is not None:
        raise InvalidInputError("report-to", refusal)
    if reporter is not None:
        # every claim and completion states the mechanism the run executes (the service counts it)
        reporter.secagg_mechanism = prepared.unit.reported_mechanism(prepared.config)
    state = open_run(prepared, reporter, epsilon_fn)
    display = start_display(prepared, progress, state.next_round)
    started = time.perf_counter()
    config = prepared.config
    try:
        # a resumed run that had diverged trains no further (it would diverge again)
        for local_round in range(state.next_round, config.rounds if state.divergence is None else state.next_round):
            if not run_round(state, local_round, display):
                break
        deliver_pending(state)
    finally:
        display.close()
    return finish_run(state, time.perf_counter() - started, plan_id)


def open_run(prepared: PreparedRun, reporter: RoundReporter | None, epsilon_fn: EpsilonFn | None) -> LoopState:
    """The loop's state: a fresh run directory (plan, config, reporting link written), or the
    checkpoint's state for a resumed run (its plan and configuration checked against these)."""
    run_dir = prepared.run_dir
    state = LoopState(
        prepared=prepared, tally=prepared.unit.steps.open_tally(prepared, epsilon_fn),
        params=prepared.initial_params, reporter=reporter, epsilon_fn=epsilon_fn,
        plan_print=fingerprint(prepared.plan_document), config_print=fingerprint(prepared.config.fingerprint_data()),
    )
    if prepared.resume and run_dir.has_checkpoint():
        resume_from_checkpoint(state)
        if reporter is not None:
            write_reporting(run_dir.root, reporter)  # a directory from before the run identity gains it
    else:
        run_dir.root.mkdir(parents=True, exist_ok=True)
        atomic_write_json(run_dir.plan, prepared.plan_document)
        # the options the unit never reads are left out (a silo run's has no secure aggregation)
        atomic_write_json(run_dir.config, prepared.unit.recorded_config(prepared.config))
        if reporter is not None:
            # before the first claim, so a run stopped before its first checkpoint resumes under
            # the same identity (docs/ledger.md §4)
            write_reporting(run_dir.root, reporter)
    state.records = truncate_rounds(run_dir.rounds, prepared.run_start + state.next_round)
    return state


def resume_from_checkpoint(state: LoopState) -> None:
    """Load the run directory's checkpoint into ``state`` (and the prepared run's strategy, plan, engine)."""
    prepared = state.prepared
    run_dir = prepared.run_dir
    saved = load_checkpoint(run_dir.checkpoint)
    if saved["plan_fingerprint"] != state.plan_print or saved["config_fingerprint"] != state.config_print:
        raise InvalidInputError("resume", f"the checkpoint in {run_dir.root} belongs to another plan or configuration")
    state.next_round = int(saved["next_round"])
    state.params = saved["global_params"].to(prepared.device)
    prepared.strategy.load_state_dict(saved["strategy"])
    if saved.get("current_plan") is not None:
        # the run had followed a re-plan: continue on it from its own start round (verified
        # again, never trusted); a re-plan made while the run was down is followed at its claim
        prepared.plan_history = list(saved.get("plan_history", []))
        state.tally = switch_plan(prepared, state.tally, saved["current_plan"], prepared.run_start + state.next_round,
                                   state.epsilon_fn, resuming=True)
    state.tally.load_state_dict(saved["ledger"])  # the checkpoint's key, kept: a file format
    prepared.unit.steps.load_state(prepared, saved)
    if state.tally.rounds_run != prepared.run_start + state.next_round - prepared.plan.start_round:
        raise InvalidInputError("resume", "the checkpoint's ledger and round index disagree")
    if state.reporter is not None:
        state.reporter.load_state_dict(saved.get("reporter", {}))
    if saved.get("diverged") is not None:
        state.divergence = Divergence.model_validate(saved["diverged"])
        state.kept_params = state.params


def start_display(prepared: PreparedRun, progress: Progress | None, next_round: int) -> Progress:
    """The progress display, with the run's start-of-run lines (learnability, warnings)."""
    display = progress or Progress(prepared.run_start + prepared.config.rounds, prepared.run_start + next_round)
    if prepared.learnability and prepared.learnability not in prepared.warnings:
        display.message(prepared.learnability)
    for warning in prepared.warnings:
        display.message(f"warning: {warning}")
    return display


def follow_replans(state: LoopState, global_round: int, display: Progress) -> None:
    """Claim ``global_round`` at the service; while the claim names a successor plan, switch to it."""
    reporter = state.reporter
    if reporter is None:
        return
    while (successor := reporter.claim(global_round)) is not None:
        if not state.prepared.unit.follows_replans:
            # a unit whose ledger cannot continue on a re-plan (every unit in the registry can:
            # trainer.run.replan.FollowingTally): stop before the round runs (nothing of it
            # is spent) and name the plan that now holds these rounds
            raise ReportingStoppedError(
                f"plan {reporter.plan_id} was re-planned as {successor.plan_id} from round {successor.start_round}; "
                f"{state.prepared.unit.name} runs do not follow a re-plan yet: train the re-plan in a new job "
                f"(gdpfed train --plan-id {successor.plan_id} --report-to (the same service) --out NEW_DIR)"
            )
        document = reporter.link.fetch_plan(successor.plan_id)
        state.tally = switch_plan(state.prepared, state.tally, document, global_round, state.epsilon_fn)
        state.prepared.plan_history.append(reporter.plan_id)
        display.message(
            f"plan {reporter.plan_id} was re-planned as {successor.plan_id} from round "
            f"{successor.start_round}; continuing on it"
        )
        reporter.plan_id = successor.plan_id


def run_round(state: LoopState, local_round: int, display: Progress) -> bool:
    """Run, account, evaluate, log, report and checkpoint one round; ``False`` once the run diverged."""
    prepared, config, steps = state.prepared, state.prepared.config, state.prepared.unit.steps
    global_round = prepared.run_start + local_round
    follow_replans(state, global_round, display)
    round_started = time.perf_counter()
    ctx = RoundContext(round_index=global_round - prepared.plan.start_round, global_round=global_round, seed=config.seed)
    previous = state.params
    state.params, outcome = prepared.engine.run(ctx, state.params)
    timing = dict(outcome.timing)

    tick = time.perf_counter()
    state.tally.record_round()
    state.tally.spent()
    timing["account"] = time.perf_counter() - tick

    last = local_round + 1 == config.rounds
    finite = bool(torch.isfinite(state.params).all())
    due = finite and (last or (local_round + 1) % config.eval_every == 0)
    tick = time.perf_counter()
    evaluation = steps.evaluate(prepared, ctx, state.params, state.tally, due)
    if due:
        timing["evaluate"] = time.perf_counter() - tick
    reason = steps.divergence_reason(finite, evaluation)
    if reason is not None:
        state.divergence = Divergence(round=global_round, reason=reason, hint=steps.divergence_hint(prepared, outcome),
                                      kept_round=global_round)
        state.kept_params = previous

    record = steps.record(outcome, state.tally, evaluation, time.perf_counter() - round_started, timing,
                           diverged=reason is not None)
    append_round(prepared.run_dir.rounds, record)
    state.records.append(record)
    # Report before the checkpoint so the checkpoint holds the queue after this attempt; a
    # crash in between re-runs the round: its claim and completion are no-ops at the service.
    refused = report_round(state, record, prepared.unit.participants(outcome))
    if (refused is not None or last or state.divergence is not None or steps.checkpoint_every_round
            or (local_round + 1) % config.checkpoint_every == 0):
        checkpoint(state, local_round + 1)
    display.round_done(record)
    if refused is not None:
        raise refused
    if state.divergence is not None:
        display.message(f"diverged at round {state.divergence.round}: {state.divergence.reason}; stopping")
        return False
    return True


def report_round(state: LoopState, record: RoundRecord,
                 participants: dict[str, list[int]] | None = None) -> ReportingStoppedError | None:
    """Complete the round at the service (with its ``participants`` where the unit reports
    them); the refusal that stops the run, if any."""
    if state.reporter is None:
        return None
    try:
        state.reporter.complete(record.round, record.aborted_pools, report_metrics(record), participants)
    except ReportingStoppedError as exc:
        return exc
    return None


def checkpoint(state: LoopState, rounds_done: int) -> None:
    """Write the checkpoint after ``rounds_done`` of this run's rounds."""
    prepared, reporter = state.prepared, state.reporter
    params = state.params if state.divergence is None or state.kept_params is None else state.kept_params
    save_checkpoint(
        prepared.run_dir.checkpoint,
        {
            "next_round": rounds_done,
            "seed": prepared.config.seed,
            "global_params": params.detach().cpu().clone(),
            "strategy": prepared.strategy.state_dict(),
            "ledger": state.tally.state_dict(),
            "reporter": reporter.state_dict() if reporter is not None else {},
            "current_plan": prepared.current_document,
            "plan_history": list(prepared.plan_history),
            "plan_fingerprint": state.plan_print,
            "config_fingerprint": state.config_print,
            "diverged": None if state.divergence is None else state.divergence.model_dump(mode="json"),
            **prepared.unit.steps.saved_state(prepared),
        },
    )


def deliver_pending(state: LoopState) -> None:
    """A finished run (or a resume of one) delivers the reports still pending."""
    reporter, prepared = state.reporter, state.prepared
    if reporter is None or not reporter.pending:
        return
    reporter.flush()
    if prepared.run_dir.has_checkpoint():
        checkpoint(state, prepared.plan.start_round + state.tally.rounds_run - prepared.run_start)


def finish_run(state: LoopState, seconds: float, plan_id: str | None) -> RunSummary:
    """Write ``summary.json`` and the plots; return the summary."""
    prepared = state.prepared
    steps = prepared.unit.steps
    summary = steps.summary(prepared, state.records, state.tally, seconds, plan_id, state.reporter, state.divergence)
    atomic_write_json(prepared.run_dir.summary, summary.model_dump(mode="json"))
    steps.plot(prepared, state.records, summary)
    return summary
