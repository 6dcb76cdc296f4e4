"""The run settings a command line sets (``TrainConfig`` fields) and the run summary it prints.

Shared by ``gdpfed train`` (``trainer/cli.py``) and ``gdpfed flower app`` (``trainer/flower/cli.py``):
argparse, ``TrainConfig`` and the lists of ``trainer.choices`` only, so building either parser
imports neither torch, nor the planner, nor the other's module. The options, their choices and
their defaults are ``TrainConfig``'s fields; the help adds what each means.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, get_args

from pydantic import ValidationError

from accounting.errors import InvalidInputError, shown, validation_error_line
from trainer.choices import DATASET_HELP, MODELS, SECAGG_EXECUTION_HELP, SECAGG_MECHANISM_HELP
from trainer.run.config import TrainConfig, secagg_worker_count

FIELDS = TrainConfig.model_fields
# TrainConfig fields given as repeatable KEY=JSON options, and the field a resumed run may
# change (the secure-aggregation worker count changes no result).
JSON_OPTIONS = ("model_options", "dataset_options", "strategy_options")
# Run options (TrainConfig fields) that the command line can set; on --resume any that is
# given must equal the stored value.
CONFIG_OPTIONS = tuple(name for name in FIELDS if name not in (*JSON_OPTIONS, "secagg_workers"))

# The command-line spelling of a TrainConfig field where it is not --field-name.
OPTION_FLAGS = {"secagg_mode": "--secagg", "dataset_options": "--dataset-option",
                "model_options": "--model-option", "strategy_options": "--strategy-option"}

# The names of trainer.units.strategies.STRATEGIES, in its order, for the parser's help
# without importing the registry (and torch); tests/trainer/test_strategy_registry.py keeps
# the two equal.
STRATEGY_NAMES = ("plan", "pfa", "fedhdp", "metric_ifca")


def choices(name: str) -> tuple[str, ...]:
    """The values of the ``TrainConfig`` field ``name``'s ``Literal``: its option's choices."""
    return get_args(FIELDS[name].annotation)


def default(name: str) -> str:
    """The ``TrainConfig`` field ``name``'s default as the help states it (``0`` for 0.0)."""
    value = FIELDS[name].default
    return f"{value:g}" if isinstance(value, float) else str(value)


def or_list(names: tuple[str, ...]) -> str:
    """``a, b or c``."""
    return f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]


def strategy_choices() -> str:
    """``plan, pfa, fedhdp or metric_ifca``: the registered strategies, as ``--strategy``'s help lists them."""
    return or_list(STRATEGY_NAMES)


def option_flag(name: str) -> str:
    """``--local-steps`` for ``local_steps``, ``--secagg`` for ``secagg_mode``."""
    return OPTION_FLAGS.get(name, "--" + name.replace("_", "-"))


def option_error(exc: ValidationError) -> InvalidInputError:
    """``TrainConfig``'s error about values from the command line, named by the option the
    user typed (``local-steps: Input should be greater than or equal to 1``, ``secagg: ...``),
    not by the field (``local_steps``); the one mapping is :func:`option_flag`. A run
    directory's ``config.json`` is named by its file and field instead (``trainer/cli.py``;
    docs/trainer.md §CLI)."""
    field, message = validation_error_line(exc.errors(include_url=False))
    name, dot, rest = field.partition(".")
    if name not in FIELDS:  # not a field's error (none today): pydantic's words as they are
        return InvalidInputError(field or "options", message)
    return InvalidInputError(option_flag(name).lstrip("-") + dot + rest, message)


def refuse_unused_options(args: argparse.Namespace, mechanism: Any, unit: str) -> None:
    """An option given on the command line that the run's mechanism never reads
    (``TrainingMechanism.unused_options``) is an ``InvalidInputError`` naming it, not a
    setting silently ignored. Given means not ``None``: every run option defaults to ``None``."""
    arg_name = {"dataset_options": "dataset_option", "model_options": "model_option",
                "strategy_options": "strategy_option"}
    for name in mechanism.unused_options:
        if getattr(args, arg_name.get(name, name), None) is not None:
            raise InvalidInputError(option_flag(name).lstrip("-"), unused_option_reason(name, mechanism, unit))


def unused_option_reason(name: str, mechanism: Any, unit: str) -> str:
    """Why ``mechanism`` (of ``unit``'s runs) refuses the ``TrainConfig`` field ``name``, one
    of its ``unused_options``, named as the command line spells it: ``metric_local runs do
    not use --secagg: ...`` (``gdpfed train`` and ``gdpfed experiment``'s train blocks)."""
    return f"{unit} runs do not use {option_flag(name)}: {mechanism.unused_reason}"


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The run's settings (``TrainConfig`` fields, ``CONFIG_OPTIONS``): ``gdpfed train`` and ``gdpfed flower app``.
    Each option with a fixed set of values takes its field's ``Literal`` as its choices, and
    each stated default is the field's."""
    parser.add_argument("--dataset", help=DATASET_HELP)
    parser.add_argument("--model", help=or_list(MODELS))
    parser.add_argument(
        "--model-option", action="append", metavar="KEY=JSON", dest="model_option",
        help="model constructor option, e.g. hidden=[64] (mlp) or channels=[8,16] (cnn); repeatable",
    )
    # The registry (trainer.units.strategies) checks the name and the options when the
    # run is prepared: importing it here would import torch just to build the parser, so
    # the help lists STRATEGY_NAMES, which a test keeps equal to the registry's.
    parser.add_argument(
        "--strategy", metavar="NAME",
        help=f"training strategy: {strategy_choices()} (default {default('strategy')}: the plan's own algorithm; "
        "a silo plan runs its own method's); an unknown name is refused with the list of registered ones",
    )
    parser.add_argument(
        "--strategy-option", action="append", metavar="KEY=JSON", dest="strategy_option",
        help="strategy option, e.g. rank=4 (pfa), ratios={\"P1\": 0.5} (fedhdp); values are JSON; repeatable",
    )
    parser.add_argument("--rounds", type=int, help="rounds to run (default: all of the plan's; never more)")
    parser.add_argument("--local-steps", type=int, help=f"local SGD steps per client (default {default('local_steps')})")
    parser.add_argument("--lr", type=float, help=f"client learning rate (default {default('lr')})")
    parser.add_argument("--momentum", type=float, help=f"client SGD momentum (default {default('momentum')})")
    parser.add_argument("--batch-size", type=int, help=f"client minibatch size (default {default('batch_size')})")
    parser.add_argument("--engine", choices=choices("engine"),
                        help=f"local training engine (default {default('engine')})")
    parser.add_argument("--partition", choices=choices("partition"),
                        help=f"how data is split into clients (default {default('partition')}; one_label: one label per client)")
    parser.add_argument(
        "--dataset-option", action="append", metavar="KEY=JSON", dest="dataset_option",
        help="loader option, e.g. client_test_fraction=0.2 (local test data per client); repeatable",
    )
    parser.add_argument(
        "--opt-out-assignment", choices=choices("opt_out_assignment"),
        help="random: clients dealt into groups at random; skewed: opted-out clients all hold --skewed-label "
        f"(default {default('opt_out_assignment')})",
    )
    parser.add_argument("--skewed-label", type=int,
                        help=f"the label of the skewed opted-out clients (default {default('skewed_label')})")
    parser.add_argument("--alpha", type=float,
                        help=f"Dirichlet concentration for --partition dirichlet (default {default('alpha')})")
    parser.add_argument("--seed", type=int, help=f"seed of every random draw (default {default('seed')})")
    parser.add_argument("--server-lr", type=float, help=f"server step size (default {default('server_lr')})")
    parser.add_argument("--server-momentum", type=float, help=f"server momentum (default {default('server_momentum')})")
    parser.add_argument(
        "--late-dropout-fraction", type=float,
        help="share of dropouts that happen after masking (recovered by secure aggregation; "
        f"default {default('late_dropout_fraction')})",
    )
    parser.add_argument(
        "--secagg", dest="secagg_mode", choices=choices("secagg_mode"),
        help=f"secure aggregation graph per pool (default {default('secagg_mode')}: SecAgg+ where the plan says it pays, "
        "docs/secure-aggregation.md; full = complete graph; sparse = SecAgg+)",
    )
    parser.add_argument(
        "--secagg-execution", dest="secagg_execution", choices=choices("secagg_execution"),
        help=f"{SECAGG_EXECUTION_HELP} (default {default('secagg_execution')})",
    )
    parser.add_argument(
        "--secagg-mechanism", dest="secagg_mechanism", choices=choices("secagg_mechanism"),
        help=f"{SECAGG_MECHANISM_HELP} (default {default('secagg_mechanism')})",
    )
    parser.add_argument("--eval-every", type=int,
                        help=f"evaluate every N rounds (and at the last; default {default('eval_every')})")
    parser.add_argument("--checkpoint-every", type=int,
                        help=f"checkpoint every N rounds (and at the last; default {default('checkpoint_every')})")


def read_json_file(path: Path, field: str) -> Any:
    """Parse a JSON file; a file that is not JSON is an ``InvalidInputError`` naming ``field``."""
    from planner.loading import parse_json, read_text  # start-up time: the parser is built without the planner

    return parse_json(read_text(path, field), path, field)


def parse_json_options(items: list[str], field: str = "model-option") -> dict[str, Any]:
    """``["hidden=[64]", "channels=[8,16]"]`` -> ``{"hidden": [64], "channels": [8, 16]}``;
    errors name ``field`` (``model-option``, ``strategy-option``) and the key."""
    from planner.loading import (  # start-up time: the parser is built without the planner
        DocumentShapeError,
        loads_unique,
    )

    options: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidInputError(field, f"expected KEY=JSON, got {item!r}")
        try:
            options[key.strip()] = loads_unique(value)  # the document bounds and duplicate keys, as files
        except DocumentShapeError as exc:
            raise InvalidInputError(f"{field} {key.strip()}", f"the value holds {exc}") from None
        except ValueError:  # not JSON, or a key given twice
            raise InvalidInputError(f"{field} {key.strip()}", f"{shown(value)!r} is not a JSON value") from None
    return options


def config_from_args(args: argparse.Namespace, stored: TrainConfig | dict[str, Any] | None, plan_rounds: int) -> Any:
    """The run's ``TrainConfig``: a new run's from the command line's options (``stored`` None;
    an invalid value is :func:`option_error`, naming the option), or a resumed run's ``stored``
    configuration, which every option given must equal (a ``TrainConfig`` already validated is
    used as it is: ``gdpfed train --resume`` validates its ``config.json`` once, naming the file).
    docs/trainer.md §CLI."""
    given = {name: getattr(args, name) for name in CONFIG_OPTIONS if getattr(args, name) is not None}
    # not compared on --resume: the count changes no result (docs/secure-aggregation.md §Parallel)
    workers = None
    if getattr(args, "secagg_workers", None) is not None:
        try:
            workers = secagg_worker_count(args.secagg_workers)
        except ValueError as exc:
            raise InvalidInputError("secagg-workers", str(exc)) from None
    if args.model_option:
        given["model_options"] = parse_json_options(args.model_option, "model-option")
    if args.strategy_option:
        given["strategy_options"] = parse_json_options(args.strategy_option, "strategy-option")
    if getattr(args, "dataset_option", None):
        given["dataset_options"] = parse_json_options(args.dataset_option, "dataset-option")
    if stored is None:
        for name in ("dataset", "model"):
            if name not in given:
                raise InvalidInputError(name, f"--{name} is required")
        given.setdefault("rounds", plan_rounds)
        try:
            return TrainConfig(**given, **({} if workers is None else {"secagg_workers": workers}))
        except ValidationError as exc:
            raise option_error(exc) from None
    config = stored if isinstance(stored, TrainConfig) else TrainConfig.model_validate(stored)
    if workers is not None:
        config = config.model_copy(update={"secagg_workers": workers})
    for name, value in given.items():
        if getattr(config, name) != value:
            flag = option_flag(name)  # the option the user typed: --secagg for secagg_mode
            # more rounds of the plan are trained as a re-plan of the rest (docs/ledger.md §6)
            more = (f"; to train more of the plan's {plan_rounds} rounds, re-plan the rest (gdpfed plan replan "
                    f"PLAN.json --rounds-done {config.rounds} --changes FILE holding {{}}, or the service's re-plan) "
                    "and train the re-plan in a new directory"
                    if name == "rounds" and value > config.rounds else "")
            raise InvalidInputError(
                flag.lstrip("-"),
                f"{flag} {value!r} differs from the run's {getattr(config, name)!r}; a resumed run keeps its settings"
                + more,
            )
    return config


def refuse_skewed_label_alone(args: argparse.Namespace, config: TrainConfig) -> None:
    """``--skewed-label`` given for a run whose clients are dealt at random is an error naming
    both options: the label is read only by ``--opt-out-assignment skewed``, so it was ignored
    in silence. It is refused rather than taken to imply skewed, which would change how every
    group's clients are dealt on the strength of an option that only names a label
    (docs/trainer.md §Clients and groups). Called after :func:`refuse_unused_options`, so a
    unit that reads neither option (silo, metric) names its own reason first."""
    if getattr(args, "skewed_label", None) is not None and config.opt_out_assignment != "skewed":
        raise InvalidInputError(
            "skewed-label",
            f"--skewed-label goes with --opt-out-assignment skewed (this run's is {config.opt_out_assignment}: "
            "clients are dealt into groups at random and no label is read)",
        )


def protected_entity(privacy_unit: str) -> str:
    """What one of a unit's figures is about, as the planner's unit names its entities
    (``PrivacyUnit.entities``, singular): ``group``, or ``silo`` for a silo plan."""
    # start-up time: the planner's units load when a summary is printed, never for --help
    from planner.units import UNITS

    unit = UNITS.get(privacy_unit)
    return "group" if unit is None else unit.entities.removesuffix("s")


def format_summary(summary: Any) -> str:
    lines = [
        f"run: {summary.run_dir} ({summary.method}, {summary.rounds_run}/{summary.rounds} rounds"
        f"{'' if summary.complete else ', incomplete'})",
    ]
    if summary.final_accuracy is not None:
        lines.append(f"test accuracy {summary.final_accuracy:.4f} (best {summary.best_accuracy:.4f}), loss {summary.final_loss:.4f}")
    entity = protected_entity(summary.privacy_unit)
    leakage = {k: summary.final_metrics.get(f"metric_leakage_{k}") for k in ("median", "max")}
    if summary.epsilon_spent or leakage["max"] is not None:
        lines.append(f"privacy: {summary.notion}")
    if summary.gradient_path is not None:
        lines.append(f"DP-SGD per-example gradients: {summary.gradient_path}")
    if leakage["max"] is not None:  # a metric ledger's figures: leakage, never an epsilon
        lines.append(f"metric leakage per client: median {leakage['median']:.4g}, max {leakage['max']:.4g}")
    for group, spent in summary.epsilon_spent.items():
        target = summary.epsilon_target.get(group)
        if spent is None:
            lines.append(f"{entity} {group}: no DP (opted out or no noise)")
        else:
            lines.append(f"{entity} {group}: epsilon spent {spent:.4g} of {target:.4g}")
    if summary.accuracy_by_group:
        lines.append("local test accuracy by group (global model): " + _by_group(summary.accuracy_by_group))
    if summary.personal_accuracy is not None:
        lines.append(f"personal models: accuracy {summary.personal_accuracy:.4f}"
                     + (f"; by group {_by_group(summary.personal_accuracy_by_group)}" if summary.personal_accuracy_by_group else ""))
    reasons = summary.secagg_full_reasons  # why a pool ran full where SecAgg+ was weighed

    def graph(pool: str, label: str) -> str:
        return f"{label} ({reasons[pool]})" if label == "full" and pool in reasons else label

    graphs = "; ".join(
        f"{pool} {', '.join(graph(pool, label) for label in ran)}" for pool, ran in summary.secagg_graphs.items() if ran
    )
    if graphs:
        execution = "real protocol" if summary.secagg_execution == "protocol" else "exact-sum simulation"
        if summary.secagg_workers is not None:
            execution += f", {summary.secagg_workers} worker process{'' if summary.secagg_workers == 1 else 'es'}"
        lines.append(f"secure aggregation ({execution}): {graphs}")
        from planner.schema import MECHANISM_LABELS  # start-up time: the parser is built without the planner

        lines.append(f"noise mechanism: {MECHANISM_LABELS[summary.secagg_mechanism or 'gaussian_continuous']}")
    aborted = {pool: count for pool, count in summary.aborted_rounds.items() if count}
    if aborted:
        lines.append("aborted pool-rounds: " + ", ".join(f"{p}={c}" for p, c in aborted.items()))
    if summary.superseded_plans:
        lines.append(f"followed re-plans: {' -> '.join([*summary.superseded_plans, str(summary.plan_id)])}")
    if summary.reports_pending:
        lines.append(f"{summary.reports_pending} round report(s) could not be delivered (kept in the checkpoint)")
    if summary.diverged is not None:
        lines.append(f"DIVERGED at round {summary.diverged.round}: {summary.diverged.reason}")
        lines.append(f"hint: {summary.diverged.hint}")
    lines.extend(f"warning: {w}" for w in summary.warnings)
    return "\n".join(lines)


def _by_group(values: dict[str, float | None]) -> str:
    return ", ".join(f"{group}={'-' if value is None else f'{value:.4f}'}" for group, value in values.items())
