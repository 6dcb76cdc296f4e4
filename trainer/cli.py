"""``gdpfed train``: execute a plan (or plan a scenario, then execute it).

(docs/trainer.md §CLI.) Everything is validated before the run directory is created:
an unreadable plan, a plan of another schema version, unknown data, a model that does
not fit the data, ``--rounds`` beyond the plan's rounds (that would overspend) all exit
with code 2, one line on stderr and nothing written. torch is imported only inside the
handler so that ``gdpfed account`` and ``gdpfed plan`` work without the trainer extra.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accounting.errors import InvalidInputError
from trainer.run.options import (
    add_run_options,
    config_from_args,
    format_summary,
    read_json_file,
    refuse_skewed_label_alone,
    refuse_unused_options,
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "train",
        description="Execute a plan round by round: Poisson sampling per group, clipping, noise "
        "shares, secure aggregation per pool, top-k, fixed-denominator averaging, privacy ledger.",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--plan", type=Path, help="plan document to execute (JSON, or YAML if it ends .yaml/.yml)")
    source.add_argument("--scenario", type=Path, help="scenario (JSON) to plan first with --method")
    parser.add_argument("--method", help="planning method for --scenario (e.g. gdpfed_plus)")
    add_run_options(parser)
    parser.add_argument(
        "--secagg-workers", metavar="N|auto",
        help="the most processes a secure-aggregation session's clients run in (default auto: every core, "
        "for sessions large enough to pay); results are the same for any count",
    )
    parser.add_argument("--out", type=Path, help="run directory (default runs/<method>-<time>)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps (default auto)")
    parser.add_argument(
        "--allow-tf32", action="store_true",
        help="let CUDA run float32 products in TF32: faster, but not reproducible from the seed "
        "(default: IEEE float32, deterministic cuDNN)",
    )
    parser.add_argument(
        "--report-to", metavar="URL",
        help="gdpfed service URL: claim and report every round in its ledger, following re-plans "
        "(with --plan-id and no --plan, the plan is fetched from the service)",
    )
    parser.add_argument("--api-key", help="operator API key for --report-to (default: $GDPFED_API_KEY)")
    parser.add_argument("--api-key-file", type=Path, help="file holding the API key for --report-to")
    parser.add_argument("--plan-id", help="the service's plan id (default: the plan file's 'id')")
    parser.add_argument("--json", action="store_true", help="print the run summary as JSON")
    parser.set_defaults(handler=handle_train)


def _plan_from_args(
    args: argparse.Namespace, config_for: Callable[[int], Any]
) -> tuple[Any, dict[str, Any], Any] | None:
    """(Plan, plan document, dataset or None) from --plan or --scenario/--method; None when neither is given.

    A scenario is planned for the model this run builds: its ``model_dim`` is the model's
    parameter count (a ``model_dim`` in the file is not needed, and a different one is
    replaced with a warning). The plan may be of any privacy unit (``planner.units``);
    ``prepare_run`` dispatches on it. ``config_for(rounds)`` is the run's configuration; the
    dataset loaded to build the model is returned so the run does not load it again.
    """
    # start-up time: gdpfed's parsers load this module; the planner loads when a run starts
    from planner.loading import naming_file, read_document
    from planner.units import load_plan_document

    if args.plan is not None:
        document = read_document(args.plan, "plan")  # .yaml/.yml as YAML, else JSON, like every document
        with naming_file("plan", args.plan):
            return load_plan_document(document), document, None
    if args.scenario is not None:
        from planner.loading import load_scenario_document
        from planner.units import make_plan, privacy_unit

        data = read_document(args.scenario, "scenario")
        dataset = None
        with naming_file("scenario", args.scenario):
            planned_for_model = "model_dim" in privacy_unit(data.get("privacy_unit", "client")).scenario_model.model_fields
        if planned_for_model:
            with naming_file("scenario", args.scenario):  # validates the rest
                draft: Any = load_scenario_document({**data, "model_dim": data.get("model_dim", 1)})
            config = config_for(draft.rounds)
            # torch only now: a bad scenario or option above is refused without it (issue 26 §3)
            from trainer.engines import num_params
            from trainer.run.preparation import build_run_model, load_run_data

            dataset = load_run_data(config, draft.total_clients)
            dim = num_params(build_run_model(config, dataset))
            if "model_dim" in data and data["model_dim"] != dim:
                _warn(f"the scenario's model_dim {data['model_dim']} is replaced by the model's {dim} parameters")
            scenario = draft.model_copy(update={"model_dim": dim})
        else:
            with naming_file("scenario", args.scenario):
                scenario = load_scenario_document(data)
        plan = make_plan(scenario, args.method)
        return plan, plan.model_dump(mode="json"), dataset
    return None


def _api_key(args: argparse.Namespace) -> str | None:
    """--api-key, else --api-key-file, else $GDPFED_API_KEY (the key is never stored).

    A given key that is empty is refused: ``--api-key "$CI_KEY"`` with the variable unset must
    not fall back to $GDPFED_API_KEY, which may hold another key (docs/trainer.md §CLI). The
    file is read like every file the command reads (``planner.loading.read_text``: a missing or
    unreadable one is one line naming ``api-key-file``)."""
    if args.api_key is not None and not args.api_key.strip():
        raise InvalidInputError("api-key", "is empty (an unset variable?): give the operator key")
    if args.api_key and args.api_key_file:
        raise InvalidInputError("api-key", "give --api-key or --api-key-file, not both")
    if args.api_key_file is not None:
        from planner.loading import read_text  # start-up time, as every import of a handler here

        key = read_text(args.api_key_file, "api-key-file").strip()
        if not key:
            raise InvalidInputError("api-key-file", f"{args.api_key_file} is empty")
        return key
    return args.api_key or os.environ.get("GDPFED_API_KEY") or None


def _service_target(args: argparse.Namespace) -> tuple[str, str | None] | None:
    """(URL, first plan id) to report to: --report-to, or the run directory's reporting.json on --resume."""
    if args.report_to:
        return args.report_to, args.plan_id
    if args.resume and args.out is not None:
        from trainer.run.directory import RunDirectory  # start-up time, as every import of a handler here

        stored = RunDirectory(args.out).reporting
        if stored.is_file():
            target = read_json_file(stored, "resume")
            return str(target["url"]), args.plan_id or str(target["plan_id"])
    return None


def _link(args: argparse.Namespace, url: str) -> Any:
    from trainer.run.reporting import ServiceLink  # start-up time: httpx loads for --report-to only

    key = _api_key(args)
    if not key:
        raise InvalidInputError(
            "api-key", f"reporting to {url} needs an operator key: --api-key, --api-key-file or $GDPFED_API_KEY"
        )
    return ServiceLink(url, key, log=_warn)


def _resolve(args: argparse.Namespace, link: Any = None) -> tuple[Any, dict[str, Any], Any, Path, Any]:
    """The plan, its document, the run configuration, the run directory and the dataset if
    one was loaded already (None: the run loads it), all validated."""
    # start-up time: gdpfed's parsers load this module; the planner loads when a run starts
    from planner.loading import naming_file
    from planner.units import load_plan_document
    from trainer.run.config import TrainConfig
    from trainer.run.directory import check_new_run_directory, check_resumable_run_directory, fingerprint
    from trainer.run.reporting import fetch_service_plan

    if args.resume:
        if args.out is None:
            raise InvalidInputError("resume", "--resume needs --out, the run directory to continue")
        run_dir = check_resumable_run_directory(args.out)
        stored_document = read_json_file(run_dir.plan, "plan")
        with naming_file("plan", run_dir.plan):
            stored_plan = load_plan_document(stored_document)
        stored_settings = read_json_file(run_dir.config, "resume")
        with naming_file("resume", run_dir.config):
            # an edited or damaged config.json is named (resume: DIR/config.json: lr: ...), as a
            # damaged plan.json or checkpoint is, not reported as if a flag were wrong; validated
            # here only: config_from_args takes the validated configuration as it is
            stored_config = TrainConfig.model_validate(stored_settings)
        config = config_from_args(args, stored_config, stored_plan.rounds)
        given = _plan_from_args(args, lambda rounds: config)
        if given is not None and fingerprint(given[0].model_dump(mode="json")) != fingerprint(
            stored_plan.model_dump(mode="json")
        ):
            raise InvalidInputError("plan", f"differs from the plan of the run in {args.out}")
        return stored_plan, stored_document, config, args.out, None if given is None else given[2]
    given = _plan_from_args(args, lambda rounds: config_from_args(args, None, rounds))
    dataset = None if given is None else given[2]
    if link is not None:
        if not args.plan_id and given is not None and isinstance(given[1].get("id"), str):
            args.plan_id = given[1]["id"]
        if not args.plan_id:
            raise InvalidInputError("plan-id", "--report-to needs --plan-id (the service's plan to train)")
        given = (*fetch_service_plan(link, args.plan_id, None if given is None else given[:2]), dataset)
    if given is None:
        raise InvalidInputError(
            "plan", "give --plan PLAN.json, --scenario SCENARIO.json --method METHOD, or --plan-id ID --report-to URL"
        )
    plan, document, dataset = given
    config = config_from_args(args, None, plan.rounds)
    out = args.out or Path("runs") / f"{plan.method}-{time.strftime('%Y%m%d-%H%M%S')}"
    check_new_run_directory(out)
    return plan, document, config, out, dataset


# The trainer extra's top-level modules (pyproject.toml [trainer]) that a run imports.
TRAINER_EXTRA_MODULES = ("torch", "cryptography", "sklearn")


def require_trainer_extra() -> None:
    """Raise ``ModuleNotFoundError`` naming the first missing module of the trainer extra.

    ``find_spec`` of a top-level name locates it without importing it, so a missing extra is
    said first (app.cli words it with the install command) while a refused call still exits
    before torch is imported (docs/trainer.md §CLI).
    """
    import importlib.util

    for module in TRAINER_EXTRA_MODULES:
        if importlib.util.find_spec(module) is None:
            raise ModuleNotFoundError(f"No module named {module!r}", name=module)


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse what the command line alone gets wrong, before the planner is imported (issue 26
    §3; docs/trainer.md §CLI): --method without --scenario or missing beside it, and, for a
    new run, every run option (``config_from_args`` with the plan's rounds still unknown: no
    option's check depends on them; --rounds against the plan's is checked once it is read).
    A resumed run's options are compared with its stored ones later, in ``_resolve``."""
    if args.plan is not None and args.method is not None:
        raise InvalidInputError("method", "--method goes with --scenario, not --plan")
    if args.scenario is not None:
        if not args.method:
            raise InvalidInputError("method", "--scenario needs --method (e.g. gdpfed_plus)")
        if args.method == "compare":
            raise InvalidInputError("method", "compare plans every method side by side; train one method")
    if not args.resume:
        config_from_args(args, None, 1)


def handle_train(args: argparse.Namespace) -> tuple[Any, str] | None:
    require_trainer_extra()
    check_arguments(args)
    # start-up time: gdpfed's parsers load this module; the planner loads when a run starts
    from planner.units import unit_of
    from trainer.run.divergence import TrainingDivergedError
    from trainer.run.reporting import ReportsUndeliveredError, RoundReporter, run_identity
    from trainer.units.registry import unit_for

    target = _service_target(args)
    if target is None and (args.api_key or args.api_key_file):
        raise InvalidInputError("api-key", "--api-key goes with --report-to")
    link = _link(args, target[0]) if target is not None else None
    try:
        plan, document, config, out, dataset = _resolve(args, link)
        refuse_unused_options(args, unit_for(plan), unit_of(plan).name)
        refuse_skewed_label_alone(args, config)
        plan_id = args.plan_id or (target[1] if target is not None else None) or (
            document.get("id") if isinstance(document.get("id"), str) else None
        )
        reporter = None
        if link is not None:
            if args.resume:
                if not plan_id:
                    raise InvalidInputError("plan-id", "--report-to needs --plan-id (the service's plan)")
                link.preflight(plan_id)
            reporter = RoundReporter(link, plan_id or "", run_id=run_identity(out, args.resume))
        # the trainer (torch) is imported once the plan and every option are checked, so a
        # refused call exits 2 without paying for torch (issue 26 §3; docs/trainer.md §CLI)
        from trainer.runner import execute_run, prepare_run

        prepared = prepare_run(
            plan, document, config, out, resume=args.resume, device=args.device, dataset=dataset,
            allow_tf32=args.allow_tf32,
        )
        summary = execute_run(prepared, reporter=reporter, plan_id=plan_id)
    finally:
        if link is not None:
            link.close()
    diverged = summary.diverged
    if summary.reports_pending or diverged is not None:
        text = summary.model_dump_json(indent=2) if args.json else format_summary(summary)
        sys.stdout.write(text + "\n")
    if summary.reports_pending:
        # undelivered reports come first: the service's ledger is missing rounds that happened
        stopped = "stopped (diverged)" if diverged is not None else "finished"
        raise ReportsUndeliveredError(
            f"training {stopped}, {summary.reports_pending} round report(s) were not delivered; rerun with "
            f"--out {summary.run_dir} --resume to deliver them"
        )
    if diverged is not None:
        raise TrainingDivergedError(
            f"training diverged at round {diverged.round} ({diverged.reason}); the rounds that ran are accounted "
            f"and the checkpoint keeps the parameters from before round {diverged.kept_round}. {diverged.hint}"
        )
    return summary, format_summary(summary)


def _warn(text: str) -> None:
    """A reporting warning: one line on stderr, never a traceback."""
    sys.stderr.write(f"warning: {text}\n")
