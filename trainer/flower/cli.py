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
    local.add_argument("--run-config", metavar="KEY=VALUE", action="append", default=[],
                       help="a run-config value for this run, as flwr run --run-config takes it (TOML values: "
                       "resume=true continues the run directory from its checkpoint); repeatable")
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
    from trainer.choices import model_key, unknown_model
    from trainer.flower import check_flwr_version
    from trainer.flower.bundle import write_bundle
    from trainer.flower.server_app import flower_unit
    from trainer.flower.settings import FlowerOptions, run_config_of, run_mechanism, train_config
    from trainer.run.options import config_from_args, refuse_skewed_label_alone, refuse_unused_options
    from trainer.units.registry import unit_for

    check_flwr_version()
    document = read_document(args.plan, "plan")  # .yaml/.yml as YAML, else JSON (the bundle holds it as JSON)
    with naming_file("plan", args.plan):
        plan = load_plan_document(document)
    flower = flower_unit(plan)  # a unit that does not run on Flower is refused now, by name
    understated = _verify(plan)
    refuse_unused_options(args, unit_for(plan), unit_of(plan).name)
    config = config_from_args(args, None, plan.rounds)
    refuse_skewed_label_alone(args, config)
    if model_key(config.model) is None:  # the ServerApp would refuse it only on the SuperLink
        raise InvalidInputError("model", unknown_model(config.model))
    if config.rounds > plan.rounds:
        raise InvalidInputError("rounds", f"{config.rounds} exceeds the plan's {plan.rounds} rounds")
    if understated and isinstance(plan, Plan) and run_mechanism(config, plan) != plan.scenario.mechanism:
        # the run executes another mechanism than the plan's: its ledger counts that one's figures,
        # which the plan's skellam figures do not describe (docs/ledger.md §5), as gdpfed train says
        understated = None
    if args.report_to and not (args.plan_id or isinstance(document.get("id"), str)):
        # as gdpfed train refuses it; the ServerApp would refuse it only on the SuperLink
        raise InvalidInputError("plan-id", "--report-to needs --plan-id (the service's plan; this plan has no 'id')")
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
    from trainer.flower.settings import train_config
    from trainer.run.options import format_summary
    from trainer.run.summary import RunSummary

    check_flwr_version()
    if args.max_processes is not None and args.max_processes < 1:
        raise InvalidInputError("max-processes", f"must be at least 1, got {args.max_processes}")
    check_timeout(args.timeout)
    plan, _, run_config = _bundle(args.app_dir)
    overrides = run_config_overrides(args.run_config, run_config)
    run_config = {**run_config, **{key: value for key, (value, _) in overrides.items()}}
    config = train_config(run_config)  # what the ServerApp will read, checked before any process starts
    if "skewed-label" in overrides:  # the bundle's own label is its default: only an override is a choice
        from trainer.run.options import refuse_skewed_label_alone

        refuse_skewed_label_alone(argparse.Namespace(skewed_label=overrides["skewed-label"][0]), config)
    seed = int(run_config.get("seed", 0))
    nodes = simulation_nodes(plan, args.nodes, seed)
    warning = check_node_count(plan, args.nodes, seed)  # before any process starts
    if warning:
        sys.stderr.write(f"gdpfed: {warning}\n")
    work = args.work or args.app_dir.resolve().parent / f"flower-local-{time.strftime('%Y%m%d-%H%M%S')}"
    log = Path(work).resolve() / "flwr-run.log"
    logged = log.stat().st_size if log.is_file() else 0  # the log is appended to: read this run's part
    summary_path = Path(str(run_config["out-dir"])) / "summary.json"
    earlier = _file_version(summary_path)  # a summary an earlier run left is not this run's
    with terminate_on_signals(), LocalFederation(work, nodes, port=args.port,
                                                 max_processes=args.max_processes or 0) as federation:
        sys.stderr.write(f"gdpfed: SuperLink on 127.0.0.1:{federation.port}, {len(nodes)} SuperNodes; logs in {work}\n")
        given = {key: text for key, (_, text) in overrides.items()}
        code = federation.run(args.app_dir, {"min-nodes": str(len(nodes)), **given}, timeout_s=args.timeout)
    stopped = server_app_error(log, logged)
    if stopped is not None:  # flwr run exits 0 on a failed run
        raise stopped
    if code != 0 or _file_version(summary_path) in (None, earlier):
        raise GdpfedError(f"the Flower run failed (flwr run exit {code}; it wrote no summary to "
                          f"{summary_path.parent}); see {log}")
    summary = RunSummary.model_validate(json.loads(summary_path.read_text(encoding="utf-8")))
    return summary, format_summary(summary)


def check_timeout(seconds: float) -> None:
    """``gdpfed flower local --timeout``: a finite number of seconds above 0, else one
    ``InvalidInputError`` naming ``timeout`` before any process starts. NaN and inf were taken
    (``Popen.wait`` then never gives up) and 0 or less started the SuperLink and the nodes only
    to give up at once (docs/flower.md §3)."""
    from accounting.validation import finite_number  # start-up time: pydantic, as the handlers' imports

    try:
        finite_number(seconds)
    except ValueError as exc:
        raise InvalidInputError("timeout", str(exc)) from None
    if seconds <= 0:
        raise InvalidInputError("timeout", f"must be more than 0 seconds, got {seconds:g}")


def run_config_overrides(given: list[str], run_config: dict[str, Any]) -> dict[str, tuple[Any, str]]:
    """``gdpfed flower local --run-config KEY=VALUE`` items: key -> (value, its text for ``flwr
    run --run-config``), each VALUE read as TOML as Flower reads it and each key one of the
    bundle's run config (docs/flower.md §3); a bad item is one ``InvalidInputError`` naming it."""
    import tomllib

    overrides: dict[str, tuple[Any, str]] = {}
    for item in given:
        key, sep, text = item.partition("=")
        key, text = key.strip(), text.strip()
        if not sep or not key or not text:
            raise InvalidInputError("run-config", f"{item!r} is not KEY=VALUE")
        if key not in run_config:
            raise InvalidInputError("run-config", f"the app's run config has no key {key!r}")
        try:
            value = tomllib.loads(f"value = {text}")["value"]
        except tomllib.TOMLDecodeError:
            raise InvalidInputError(f"run-config {key}", f"{text!r} is not a TOML value (a string needs quotes: "
                                    f"{key}=\"...\")") from None
        overrides[key] = (value, text)
    return overrides


def _file_version(path: Path) -> tuple[int, int] | None:
    """(inode, modification time in ns) of ``path``, ``None`` when there is none: a summary
    rewritten by the run differs (``trainer.runner.finish_run`` replaces the file)."""
    try:
        found = path.stat()
    except OSError:
        return None
    return found.st_ino, found.st_mtime_ns


class ServerAppFailed(GdpfedError):
    """The ServerApp of a ``gdpfed flower local`` run stopped on a gdpfed error: its line and exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def server_app_error(log: Path, offset: int = 0) -> ServerAppFailed | None:
    """The error a ServerApp stopped on, from its line in the ``flwr run --stream`` log past
    ``offset`` (``trainer.flower.server_app.ERROR_LINE``): its message and exit code (2, or 3
    when reporting to the service stopped); ``None`` when it wrote none (docs/flower.md §3)."""
    # imported when the subcommand runs: the flower extra (flwr) and start-up time
    from trainer.flower.server_app import ERROR_LINE

    try:
        with log.open("rb") as stream:
            stream.seek(offset)
            lines = stream.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if found := ERROR_LINE.match(line.strip()):
            return ServerAppFailed(f"the ServerApp stopped: {found.group(2)} (see {log})", int(found.group(1) or 2))
    return None


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
