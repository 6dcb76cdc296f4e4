"""The ServerApp: a plan's run on a Flower Grid, with ``gdpfed train``'s run machinery (docs/flower.md §2-§3).

``build_server_app(bundle_dir)`` returns the ``flwr.serverapp.ServerApp`` a bundle's
``server_app.py`` assigns to ``app``; its main calls ``run_plan``, which is
``gdpfed train`` with the round engine replaced:

- the plan (the bundle's ``plan.json``) is verified (``planner.verify``) and the run
  configuration validated before anything is written; a bad setting stops the run with
  one line naming it;
- ``trainer.runner.prepare_run`` / ``execute_run`` with ``FlowerRoundEngine``: the
  same privacy ledger (``planner.ledger``), ``rounds.jsonl``, checkpoints and resume,
  server-side evaluation, ``summary.json``;
- with ``report-to``, the rounds are claimed and reported to the service exactly as
  ``gdpfed train --report-to`` does (the API key comes from ``GDPFED_API_KEY`` on the
  ServerApp's host, never from the run config, which the SuperLink stores and shows). A
  re-plan by the service stops the run: the nodes hold the old plan in their bundle.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from accounting.errors import GdpfedError, InvalidInputError, message_line
from trainer.flower.units import (
    FlowerUnit,
    check_client_node_count,
    check_client_settings,
    check_metric_node_count,
    check_registered_strategy,
    check_silo_node_count,
    check_silo_strategy,
    client_nodes,
    silo_nodes,
)


def _stderr(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def run_plan(
    grid: Grid,
    plan_document: dict[str, Any],
    run_config: Mapping[str, Any],
    *,
    dataset: Any = None,
    api_key: str | None = None,
    log: Callable[[str], None] = _stderr,
    progress: Any = None,
    engine_hook: Callable[[Any], None] | None = None,
) -> Any:
    """Execute the plan over ``grid``; returns the ``RunSummary`` (also written to the run directory).

    ``dataset`` may be passed pre-loaded (tests); ``engine_hook`` is called with each
    ``FlowerRoundEngine`` built (tests audit what it received).
    """
    # start-up time: the ServerApp loads the trainer (torch) only when a run starts
    from planner.units import load_plan_document
    from trainer.flower import check_flwr_version
    from trainer.flower.settings import split_run_config, train_config
    from trainer.run.directory import check_new_run_directory, check_resumable_run_directory
    from trainer.run.reporting import RoundReporter, ServiceLink, fetch_service_plan, run_identity
    from trainer.runner import execute_run

    check_flwr_version()
    plan = load_plan_document(plan_document)
    prepare = flower_unit(plan).prepare
    options, _ = split_run_config(run_config)
    config = train_config(run_config)
    out = Path(options.out_dir)
    if options.resume:
        check_resumable_run_directory(out)
    else:
        # in the words of a Flower run: its run config, and the bundle's --run-dir
        check_new_run_directory(out, field="out-dir", advice="run with --run-config resume=true to continue the run "
                                "there, or write the bundle with another --run-dir")
    plan_id = options.plan_id or (plan_document.get("id") if isinstance(plan_document.get("id"), str) else None)

    reporter = None
    link = None
    if options.report_to:
        key = api_key or os.environ.get("GDPFED_API_KEY")
        if not key:
            raise InvalidInputError("report-to", "reporting needs the operator key in $GDPFED_API_KEY on the ServerApp's host")
        if not plan_id:
            raise InvalidInputError("plan-id", "report-to needs plan-id (the service's plan)")
        link = ServiceLink(options.report_to, key, log=lambda text: log(f"warning: {text}"))
    try:
        if link is not None and plan_id is not None:
            if options.resume:
                link.preflight(plan_id)
            else:
                fetch_service_plan(link, plan_id, (plan, plan_document))
            reporter = RoundReporter(link, plan_id, run_id=run_identity(out, options.resume))

        prepared, membership = prepare(grid, plan, plan_document, config, out, options, dataset=dataset, log=log,
                                       engine_hook=engine_hook)
        # everything is validated; now wait for the nodes and meet them
        membership.wait_for(options.min_nodes, options.wait_timeout)
        log(f"gdpfed: {membership.joined_line()}")
        return execute_run(prepared, reporter=reporter, progress=progress, plan_id=plan_id)
    finally:
        if link is not None:
            link.close()


def prepare_client_run(grid: Grid, plan: Any, plan_document: dict[str, Any], config: Any, out: Path, options: Any, *,
                       dataset: Any = None, log: Callable[[str], None] = _stderr,
                       engine_hook: Callable[[Any], None] | None = None) -> tuple[Any, Any]:
    """A client-level plan's prepared run with ``FlowerRoundEngine``; the membership to wait for."""
    # start-up time: the ServerApp loads the trainer (torch) only when a run starts
    from trainer.flower.client_app import plan_fingerprint
    from trainer.flower.engine import FlowerEngineFactory, Membership
    from trainer.flower.settings import run_mechanism
    from trainer.runner import prepare_run

    # the run's noise mechanism from its configuration, as gdpfed train's (nodes that run another are left out)
    membership = Membership(grid, plan, plan_fingerprint(plan), timeout=options.step_timeout, log=log,
                            mechanism=run_mechanism(config, plan))
    build_engine = FlowerEngineFactory(grid, membership, plan, secagg_mode=config.secagg_mode,
                                       step_timeout=options.step_timeout, log=log, hook=engine_hook)
    prepared = prepare_run(plan, plan_document, config, out, resume=options.resume, device=options.device,
                           dataset=dataset, engine_factory=build_engine)
    return prepared, membership


def prepare_silo_run(grid: Grid, plan: Any, plan_document: dict[str, Any], config: Any, out: Path, options: Any, *,
                     dataset: Any = None, log: Callable[[str], None] = _stderr,
                     engine_hook: Callable[[Any], None] | None = None) -> tuple[Any, Any]:
    """A silo plan's prepared run, each silo's DP-SGD on its node (``trainer.flower.silo``)."""
    # start-up time: the ServerApp loads the trainer (torch) only when a run starts
    from trainer.flower.silo import prepare_flower_silo_run

    return prepare_flower_silo_run(grid, plan, plan_document, config, out, options, dataset=dataset, log=log)


def prepare_metric_run(grid: Grid, plan: Any, plan_document: dict[str, Any], config: Any, out: Path, options: Any, *,
                       dataset: Any = None, log: Callable[[str], None] = _stderr,
                       engine_hook: Callable[[Any], None] | None = None) -> tuple[Any, Any]:
    """A metric plan's prepared run, each selected client's release on its node (``trainer.flower.metric``)."""
    # start-up time: the ServerApp loads the trainer (torch) only when a run starts
    from trainer.flower.metric import prepare_flower_metric_run

    return prepare_flower_metric_run(grid, plan, plan_document, config, out, options, dataset=dataset, log=log)


# The training mechanisms (trainer.units.registry) a ServerApp runs, by name: each prepares
# gdpfed train's run with its rounds on the Grid and returns the membership to wait for, and
# says how gdpfed flower checks its strategy and deals and counts its nodes (trainer.flower.units).
FLOWER_MECHANISMS: dict[str, FlowerUnit] = {
    "gaussian_secagg": FlowerUnit(prepare=prepare_client_run, check_strategy=check_client_settings,
                                  simulation_nodes=client_nodes, check_node_count=check_client_node_count),
    "dpsgd_silo": FlowerUnit(prepare=prepare_silo_run, check_strategy=check_silo_strategy,
                             simulation_nodes=silo_nodes, check_node_count=check_silo_node_count),
    "metric_laplace": FlowerUnit(prepare=prepare_metric_run, check_strategy=check_registered_strategy,
                                 simulation_nodes=client_nodes, check_node_count=check_metric_node_count),
}


def flower_unit(plan: Any) -> FlowerUnit:
    """How ``plan``'s unit runs on Flower, by its mechanism (found through
    ``trainer.units.registry.unit_for``), or ``InvalidInputError("privacy_unit")`` for a unit
    that does not run on Flower yet."""
    # start-up time: the unit registry is torch-free, but not needed before a run starts
    from trainer.units.registry import unit_for

    unit = unit_for(plan)
    flower = FLOWER_MECHANISMS.get(unit.mechanism)
    if flower is None:
        raise InvalidInputError(
            "privacy_unit", f"{unit.name} plans ({unit.mechanism}) do not run on Flower yet; train them with gdpfed train"
        )
    return flower


# Flower's logger, whose record of a ServerApp's exception carries the traceback (_NoTraceback)
FLOWER_LOGGER = "flwr"

# The line a ServerApp that stopped on a gdpfed error writes to its log, which ``flwr run
# --stream`` prints: ``gdpfed: error: MESSAGE``, or ``gdpfed: error (exit N): MESSAGE`` for an
# error of another exit code than 2 (3: reporting stopped or reports undelivered).
# ``gdpfed flower local`` finds it in the run's log (``trainer.flower.cli.server_app_error``).
ERROR_LINE = re.compile(r"^gdpfed: error(?: \(exit (\d+)\))?: (.+)$")


class ServerAppStopped(Exception):
    """The ServerApp stopped on a gdpfed error, already written as one line (``ERROR_LINE``).

    Raised to Flower rather than ``SystemExit``: Flower's ServerApp runner handles an
    ``Exception`` by flushing the app's log to the SuperLink (so ``flwr run --stream`` shows the
    line), marking the run failed with this message as its details (``flwr ls``) and exiting;
    a ``SystemExit`` skipped all three, the line was lost and the run stayed "running" until
    the SuperLink missed the process's heartbeats (about a minute). Its message is the line, which
    carries the exit code (Flower exits the process with its own)."""


class _NoTraceback(logging.Filter):
    """Drop the traceback Flower's runner logs with a ``ServerAppStopped``: the error is the
    one line already written (docs/architecture.md §Errors), not a bug in the app."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], ServerAppStopped):
            record.exc_info = None
            record.exc_text = None
        return True


def error_line(exc: GdpfedError) -> str:
    """The one line a ServerApp writes for ``exc`` (``ERROR_LINE``)."""
    code = int(getattr(exc, "exit_code", 2))
    return f"gdpfed: error{'' if code == 2 else f' (exit {code})'}: {message_line(exc.message)}"


def build_server_app(bundle_dir: Path) -> ServerApp:
    """The ServerApp of the bundle in ``bundle_dir`` (it runs the bundle's ``plan.json``).
    A gdpfed error stops it with one line in the run's log and a failed run (docs/flower.md §3)."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        document = json.loads((bundle_dir / "plan.json").read_text(encoding="utf-8"))
        try:
            summary = run_plan(grid, document, context.run_config)
        except GdpfedError as exc:
            # One line naming the problem (docs/architecture.md "Errors"), then a failed run.
            line = error_line(exc)
            _stderr(line)
            logging.getLogger(FLOWER_LOGGER).addFilter(_NoTraceback())
            raise ServerAppStopped(line) from None
        _stderr(summary.model_dump_json(indent=2))

    return app
