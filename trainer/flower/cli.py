"""``gdpfed flower``: build a plan's Flower app and run it (docs/flower.md §3).

- ``gdpfed flower app --plan PLAN.json --dataset D --model M [run options] --out APP_DIR
  --run-dir RUN_DIR`` writes the app directory (``trainer.flower.bundle``); then
  ``flwr run APP_DIR <connection>`` runs it on any Flower deployment.
- ``gdpfed flower local APP_DIR [--nodes N]`` runs it on a SuperLink and N SuperNodes
  started on 127.0.0.1 (``trainer.flower.local``), nodes dealt into the plan's groups as
  ``gdpfed train`` deals clients, and prints the run's summary.
- ``gdpfed flower loopback APP_DIR`` runs it in this process over ``LoopbackGrid``
  (no processes, no sockets): a dry run of the same ServerApp and ClientApp.

flwr is imported inside the handlers, so ``gdpfed`` works without the ``flower`` extra.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, cast

from accounting.errors import GdpfedError, InvalidInputError


def register(subparsers: Any) -> None:
    # imported when the subcommand runs: the flower extra (flwr) and start-up time
    from trainer.run.options import add_run_options

    parser = subparsers.add_parser(
        "flower", help="run a plan on Flower (flwr): app bundle, loopback deployment, dry run",
        description="Execute a plan on Flower with gdpfed's mechanism (docs/flower.md).",
    )
    commands = parser.add_subparsers(dest="flower_command", metavar="COMMAND", required=True)

    app = commands.add_parser("app", help="write the Flower app directory for a plan",
                              description="Write the app directory `flwr run` takes for a plan.")
    app.add_argument("--plan", type=Path, required=True, help="plan document (JSON, or YAML if it ends .yaml/.yml), e.g. the service's plan")
    add_run_options(app)
    app.add_argument("--out", type=Path, required=True, help="app directory to write (new or empty)")
    app.add_argument("--run-dir", type=Path, required=True,
                     help="run directory on the ServerApp's host (rounds.jsonl, checkpoint, summary)")
    app.add_argument("--report-to", metavar="URL", default="", help="gdpfed service URL (key: $GDPFED_API_KEY on the SuperLink host)")
    app.add_argument("--plan-id", default="", help="the service's plan id (default: the plan's 'id')")
    app.add_argument("--step-timeout", type=float, default=600.0, help="seconds to wait for each protocol step (600)")
    app.add_argument("--min-nodes", type=int, default=1, help="nodes to wait for before round 0 (1)")
    app.add_argument("--wait-timeout", type=float, default=300.0, help="seconds to wait for --min-nodes (300)")
    app.add_argument("--json", action="store_true", help="print the result as JSON")
    app.set_defaults(handler=handle_app)

    local = commands.add_parser("local", help="run an app on a SuperLink and SuperNodes on 127.0.0.1",
                                description="Start flower-superlink and one flower-supernode per node on "
                                "127.0.0.1, flwr run the app, stop them; print the run summary.")
    local.add_argument("app_dir", type=Path, help="app directory (gdpfed flower app)")
    local.add_argument("--nodes", type=int, help="SuperNodes (default: the plan's population)")
    local.add_argument("--port", type=int, default=0, help="SuperLink port on 127.0.0.1 (default: a free one)")
    local.add_argument("--work", type=Path, help="directory for logs and FLWR_HOME (default: APP_DIR/../flower-local-<time>)")
    local.add_argument("--timeout", type=float, default=3600.0, help="seconds before the run is given up (3600)")
    local.add_argument("--max-processes", type=int, default=None,
                       help="ClientApp processes alive at once on this host (default: twice the CPU count; docs/flower.md §3)")
    local.add_argument("--json", action="store_true", help="print the summary as JSON")
    local.set_defaults(handler=handle_local)

    loopback = commands.add_parser("loopback", help="dry-run an app in this process (LoopbackGrid)",
                                   description="Run the app's ServerApp and ClientApp in this process over an "
                                   "in-memory Grid, nodes dealt into groups as gdpfed train deals clients.")
    loopback.add_argument("app_dir", type=Path, help="app directory (gdpfed flower app)")
    loopback.add_argument("--nodes", type=int, help="nodes (default: the plan's population)")
    loopback.add_argument("--json", action="store_true", help="print the summary as JSON")
    loopback.set_defaults(handler=handle_loopback)


def handle_app(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    # imported when the subcommand runs: the flower extra (flwr) and start-up time
    from planner.loading import naming_file, read_document
    from planner.schema import Plan
    from planner.units import load_plan_document, unit_of
    from trainer.flower import check_flwr_version
    from trainer.flower.bundle import write_bundle
    from trainer.flower.server_app import flower_unit
    from trainer.flower.settings import FlowerOptions, run_config_of, run_mechanism, train_config
    from trainer.run.options import config_from_args, refuse_unused_options
    from trainer.units.registry import unit_for

    check_flwr_version()
    document = read_document(args.plan, "plan")  # .yaml/.yml as YAML, else JSON (the bundle holds it as JSON)
    with naming_file("plan", args.plan):
        plan = load_plan_document(document)
    flower = flower_unit(plan)  # a unit that does not run on Flower is refused now, by name
    understated = _verify(plan)
    refuse_unused_options(args, unit_for(plan), unit_of(plan).name)
    config = config_from_args(args, None, plan.rounds)
    if config.rounds > plan.rounds:
        raise InvalidInputError("rounds", f"{config.rounds} exceeds the plan's {plan.rounds} rounds")
    if understated and isinstance(plan, Plan) and run_mechanism(config, plan) != plan.scenario.mechanism:
        # the run executes another mechanism than the plan's: its ledger counts that one's figures,
        # which the plan's skellam figures do not describe (docs/ledger.md §5), as gdpfed train says
        understated = None
    options = FlowerOptions.model_validate({
        "out-dir": str(args.run_dir.resolve()), "report-to": args.report_to, "plan-id": args.plan_id,
        "step-timeout": args.step_timeout, "min-nodes": args.min_nodes, "wait-timeout": args.wait_timeout,
    })
    flower.check_strategy(plan, config)  # refuse an unknown strategy, a bad option or another unit now
    if config.strategy_options.get("adaptive_clip"):
        # imported when the subcommand runs: start-up time
        from trainer.units.client.adaptive_clip import AdaptiveClipping

        # only a client plan's strategies take adaptive_clip (flower.check_strategy refused the others)
        AdaptiveClipping.from_plan(cast(Plan, plan))  # refuse a plan without an adaptive_clip block now, not on the SuperLink
    run_config = run_config_of(options, config)
    train_config(run_config)  # what the ServerApp will read back, checked now
    out = write_bundle(args.out, document, run_config)
    text = (
        f"wrote the Flower app for plan {document.get('id', plan.method)} to {out}\n"
        f"run it on a deployment:  flwr run {out} <connection> --stream\n"
        f"or on 127.0.0.1:         gdpfed flower local {out}"
    )
    if understated:
        text += f"\nwarning: {understated}"
    return {"app_dir": str(out), "run_config": run_config}, text


def _verify(plan: Any) -> str | None:
    """The plan checked by its unit's verifier as ``gdpfed train`` checks it (the ServerApp's
    ``prepare_run`` checks it again): a client or silo plan whose stated figures are below its
    run's ledger is written with the run's warning (``planner.verify.understated_warning``), not
    refused, since the run's ledger counts the executed figures (docs/ledger.md §5)."""
    from planner.schema import Plan
    from planner.units import silo_sample, unit_of
    from planner.verify import understated_warning, verify_executable

    if isinstance(plan, silo_sample.SiloSamplePlan):
        found = silo_sample.verify(plan, understated="report")  # as gdpfed train runs it (docs/mrmtl.md §2)
    elif isinstance(plan, Plan):
        found = verify_executable(plan, understated="report")
    else:
        unit_of(plan).verify(plan)
        return None
    return understated_warning(found) if found else None


def _bundle(app_dir: Path) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """(plan, plan document, run config) of an app directory."""
    import tomllib

    # imported when the subcommand runs: the flower extra (flwr) and start-up time
    from planner.loading import naming_file, read_text
    from planner.units import load_plan_document
    from trainer.run.options import read_json_file

    if not (app_dir / "pyproject.toml").is_file() or not (app_dir / "plan.json").is_file():
        raise InvalidInputError("app_dir", f"{app_dir} is not an app directory written by gdpfed flower app")
    document = read_json_file(app_dir / "plan.json", "plan")
    manifest = app_dir / "pyproject.toml"
    try:
        run_config = tomllib.loads(read_text(manifest, "app_dir"))["tool"]["flwr"]["app"]["config"]
    except tomllib.TOMLDecodeError as exc:  # its message already ends with "(at line L, column C)"
        raise InvalidInputError("app_dir", f"{manifest} is not valid TOML: {exc}") from None
    except (KeyError, TypeError):
        raise InvalidInputError("app_dir", f"{manifest} has no [tool.flwr.app.config] table: rewrite it with gdpfed flower app") from None
    if not isinstance(run_config, dict):
        raise InvalidInputError("app_dir", f"{manifest}: [tool.flwr.app.config] is not a table")
    with naming_file("plan", app_dir / "plan.json"):
        return load_plan_document(document), document, run_config


def simulation_nodes(plan: Any, count: int | None, seed: int) -> list[dict[str, str | int | bool]]:
    """Node configs for ``count`` nodes (default the plan's population): as ``gdpfed train``
    deals clients (node i is client i of the dataset, in its group, with real (secret)
    noise) or one node per silo, as the plan's unit deals them (``trainer.flower.units``)."""
    # imported when the subcommand runs: the flower extra (flwr) and start-up time
    from trainer.flower.server_app import flower_unit

    return flower_unit(plan).simulation_nodes(plan, count, seed)


def check_node_count(plan: Any, count: int | None, seed: int) -> str | None:
    """Refuse a ``--nodes`` with which nothing would train (``InvalidInputError("nodes")``:
    no pool of a client plan reaches its threshold); a warning line when some of the plan's
    groups or silos would never train; ``None`` otherwise (docs/flower.md §3; each unit's
    rule in ``trainer.flower.units``)."""
    # imported when the subcommand runs: the flower extra (flwr) and start-up time
    from trainer.flower.server_app import flower_unit

    return flower_unit(plan).check_node_count(plan, count, seed)


def handle_local(args: argparse.Namespace) -> tuple[Any, str]:
    # imported when the subcommand runs: the flower extra (flwr) and start-up time
    from trainer.flower import check_flwr_version
    from trainer.flower.local import LocalFederation, terminate_on_signals
    from trainer.run.options import format_summary
    from trainer.run.summary import RunSummary

    check_flwr_version()
    if args.max_processes is not None and args.max_processes < 1:
        raise InvalidInputError("max-processes", f"must be at least 1, got {args.max_processes}")
    plan, _, run_config = _bundle(args.app_dir)
    seed = int(run_config.get("seed", 0))
    nodes = simulation_nodes(plan, args.nodes, seed)
    warning = check_node_count(plan, args.nodes, seed)  # before any process starts
    if warning:
        sys.stderr.write(f"gdpfed: {warning}\n")
    work = args.work or args.app_dir.resolve().parent / f"flower-local-{time.strftime('%Y%m%d-%H%M%S')}"
    with terminate_on_signals(), LocalFederation(work, nodes, port=args.port,
                                                 max_processes=args.max_processes or 0) as federation:
        sys.stderr.write(f"gdpfed: SuperLink on 127.0.0.1:{federation.port}, {len(nodes)} SuperNodes; logs in {work}\n")
        code = federation.run(args.app_dir, {"min-nodes": str(len(nodes))}, timeout_s=args.timeout)
    summary_path = Path(str(run_config["out-dir"])) / "summary.json"
    if code != 0 or not summary_path.is_file():
        raise GdpfedError(f"the Flower run failed (flwr run exit {code}); see {work / 'flwr-run.log'}")
    summary = RunSummary.model_validate(json.loads(summary_path.read_text(encoding="utf-8")))
    return summary, format_summary(summary)


def handle_loopback(args: argparse.Namespace) -> tuple[Any, str]:
    # imported when the subcommand runs: the flower extra (flwr) and start-up time
    from trainer.flower import check_flwr_version
    from trainer.flower.client_app import build_client_app
    from trainer.flower.local import terminate_on_signals
    from trainer.flower.server_app import run_plan
    from trainer.flower.testing import LoopbackGrid
    from trainer.run.options import format_summary

    check_flwr_version()
    plan, document, run_config = _bundle(args.app_dir)
    seed = int(run_config.get("seed", 0))
    nodes = simulation_nodes(plan, args.nodes, seed)
    warning = check_node_count(plan, args.nodes, seed)
    if warning:
        sys.stderr.write(f"gdpfed: {warning}\n")
    grid = LoopbackGrid(build_client_app(args.app_dir), {1 + i: n for i, n in enumerate(nodes)}, run_config)
    with terminate_on_signals():  # one line and exit 128 + signal, as gdpfed flower local
        summary = run_plan(grid, document, {**run_config, "min-nodes": len(nodes)})
    return summary, format_summary(summary)
