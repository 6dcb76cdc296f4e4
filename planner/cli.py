"""``gdpfed plan``: plan a scenario, re-plan a running plan, or sweep one group's budget.

::

    gdpfed plan SCENARIO.json [--method M|compare] [--accountant A] [--json] [--out PLAN.json]
    gdpfed plan replan PLAN.json --rounds-done N --changes CHANGES.json [--secagg-mechanism M]
        [--json] [--out NEW.json]
    gdpfed plan sweep SCENARIO.json --group ID --epsilons 0.5,1,2,4,8 [--plot out.png] [--json]
    gdpfed plan verify PLAN.json [--json]

The first positional is either a scenario file or the word ``replan`` / ``sweep`` / ``verify``
followed by a file. The handler raises the project's errors; app/cli.py prints them as one line and
exits 2. Importing this module loads no numerics (the handlers import the planner), and
``app/cli.py`` imports it only for ``gdpfed plan``.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from accounting.choices import AccountantName, SecaggMechanism
from accounting.errors import InvalidInputError, out_of_float_range

if TYPE_CHECKING:
    from planner.units.base import PrivacyUnit

# Start-up time: the planner (numpy, scipy, pydantic's models) is imported by the handlers,
# not with this module, so `gdpfed plan --help` and argparse's refusals build the parser from
# accounting.choices alone (issue 26 §2; docs/architecture.md, "Command line").


# '-1', '-0.5', '-.5', '-1e-3', '-1,2': a dash, then a number, then anything (argparse's own
# pattern, r'^-\d+$|^-\d*\.\d+$', takes the first three only; later Pythons' argparse uses
# r'-\.?\d', the same test as this one).
_STARTS_LIKE_A_NEGATIVE_NUMBER = re.compile(r"^-(\d|\.\d)")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plan",
        description="Plan a scenario (JSON or YAML), re-plan a running plan ('replan PLAN.json'), "
        "sweep one group's epsilon ('sweep SCENARIO.json'), or verify a plan file as gdpfed train does "
        "before round 0 ('verify PLAN.json').",
    )
    parser.add_argument(
        "target",
        nargs="+",
        metavar="SCENARIO | replan PLAN | sweep SCENARIO | verify PLAN",
        help="a scenario file, or 'replan PLAN.json', or 'sweep SCENARIO.json', or 'verify PLAN.json'",
    )
    # The planner checks the name against its registry (planner.methods.METHODS); a
    # choices list here would need the planner imported just to build the parser.
    parser.add_argument(
        "--method", default=None, metavar="METHOD",
        help="planning method (default gdpfed_plus; docs/planning.md §2), or compare; "
        "an unknown name is refused with the list of known ones",
    )
    parser.add_argument(
        "--accountant", choices=get_args(AccountantName), default=None, help="override the scenario's accountant"
    )
    parser.add_argument("--out", default=None, help="also write the plan document (JSON) to this file")
    parser.add_argument("--rounds-done", type=int, default=None, help="replan: rounds of the plan already run")
    parser.add_argument("--changes", default=None, help="replan: budget/membership changes (JSON or YAML)")
    parser.add_argument("--parent-plan-id", default=None, help="replan: id of the parent plan to record")
    parser.add_argument(
        "--secagg-mechanism", choices=get_args(SecaggMechanism), default=None,
        help="replan: the noise mechanism the plan's run executed (its summary.json's secagg_mechanism); "
        "budgets are checked against that mechanism's record of what was spent (default: unknown, the "
        "larger of the Gaussian and the Skellam record; docs/planning.md §9)",
    )
    parser.add_argument("--group", default=None, help="sweep: the group whose epsilon is swept")
    # argparse reads a word that starts with '-' as an option unless it is one negative number
    # ('-1', '-.5'), so '--epsilons -1,2' was 'expected one argument'. A word that starts like a
    # negative number is a value here (no option of this parser starts with a digit), so the
    # sweep's check refuses it naming --epsilons, as it does '--epsilons=-1,2'.
    parser._negative_number_matcher = _STARTS_LIKE_A_NEGATIVE_NUMBER
    parser.add_argument("--epsilons", default=None, help="sweep: comma-separated epsilons, e.g. 0.5,1,2,4,8")
    parser.add_argument("--plot", default=None, help="sweep: write a PNG of the rates to this file")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> tuple[Any, str]:
    """Dispatch on the first positional: a scenario path, 'replan', 'sweep' or 'verify'. A
    computation that valid inputs at the edge of their domains drive out of floating-point
    range is one line (``accounting.errors.out_of_float_range``), as the service's 422."""
    try:
        return _dispatch(args)
    except ArithmeticError as exc:
        raise out_of_float_range(exc) from None


def _dispatch(args: argparse.Namespace) -> tuple[Any, str]:
    target = list(args.target)
    forms = {"replan": _replan, "sweep": _sweep, "verify": _verify}
    if target[0] in forms and len(target) == 2:
        return forms[target[0]](args, target[1])
    if target[0] in forms:
        raise InvalidInputError(target[0], f"usage: gdpfed plan {target[0]} FILE (exactly one file)")
    if len(target) != 1:
        raise InvalidInputError("scenario", "give one scenario file (or 'replan PLAN' / 'sweep SCENARIO' / 'verify PLAN')")
    _reject(args, ("rounds_done", "changes", "parent_plan_id", "secagg_mechanism", "group", "epsilons", "plot"),
            "plan")
    return _plan(args, target[0])


def _plan(args: argparse.Namespace, path: str) -> tuple[Any, str]:
    """Plan with the planner of the scenario's privacy unit (planner.units)."""
    from planner.loading import load_scenario_document, naming_file, read_document  # start-up time (above)
    from planner.units import make_plan, privacy_unit, unit_of

    document = read_document(path, "scenario")
    with naming_file("scenario", path):
        if "model_dim" in privacy_unit(document.get("privacy_unit", "client")).scenario_model.model_fields \
                and "model_dim" not in document:
            # pydantic would say only 'Field required': say what it is and where it can come from
            raise InvalidInputError(
                "model_dim", "missing: the parameter count of the model (n; one hypothesis of a metric plan) enters "
                "the plan, and gdpfed plan builds no model; give it, or let gdpfed train --scenario set it from the "
                "model it trains"
            )
    scenario = _with_accountant(load_scenario_document(path), args.accountant)
    plan = make_plan(scenario, args.method)
    _write(plan, args.out)
    return plan, unit_of(plan).describe(plan)


def _replan(args: argparse.Namespace, path: str) -> tuple[Any, str]:
    from planner.loading import load_changes, load_plan_document_file  # start-up time (above)
    from planner.units import unit_of

    _reject(args, ("method", "accountant", "group", "epsilons", "plot"), "plan replan")
    if args.rounds_done is None:
        raise InvalidInputError("--rounds-done", "replan needs --rounds-done N")
    if args.changes is None:
        raise InvalidInputError("--changes", "replan needs --changes CHANGES.json (use {} for none)")
    plan = load_plan_document_file(path)
    unit = unit_of(plan)
    if unit.replan is None:
        raise InvalidInputError(
            "plan", f"{path}: privacy_unit: {unit.name!r} plans cannot be re-planned (their unit has no re-plan)"
        )
    changes = load_changes(args.changes, unit.changes_model)
    # from a file no run's participations are known: a metric plan's re-plan counts every
    # client as released in every round done, within its cap (never optimistic;
    # planner.units.metric_local.replan_metric)
    if args.secagg_mechanism is not None and not unit.secagg_mechanisms:
        raise InvalidInputError(
            "--secagg-mechanism", f"{unit.name} plans run no secure-aggregation noise: leave it out"
        )
    new = unit.replan(plan, args.rounds_done, changes, None, args.parent_plan_id, args.secagg_mechanism)
    _write(new, args.out)
    return new, unit.describe(new)


def _verify(args: argparse.Namespace, path: str) -> tuple[Any, str]:
    """The plan file checked by its unit's verifier, as ``gdpfed train`` checks it before round 0
    (``planner.units.verify``; a client plan: ``planner.verify.verify_executable``, docs/ledger.md
    §5): nothing the planner wrote is trusted, and a refusal names the file and the field."""
    from planner.loading import load_plan_document_file, naming_file  # start-up time (above)
    from planner.units import unit_of, verify

    _reject(args, ("method", "accountant", "out", "rounds_done", "changes", "parent_plan_id", "secagg_mechanism",
                   "group", "epsilons", "plot"), "plan verify")
    plan = load_plan_document_file(path)
    with naming_file("plan", path):
        verify(plan)
    unit = unit_of(plan)
    mechanism, accountants = _checked_with(plan, unit)
    checked = f", checked with {', '.join(accountants)}" if accountants else ""
    return {"plan": path, "privacy_unit": unit.name, "mechanism": mechanism, "accountants": accountants,
            "verified": True}, (
        f"{path}: verified ({unit.name} plan, mechanism {mechanism}{checked}): it passes the checks gdpfed train "
        "makes before round 0 (docs/ledger.md §5)"
    )


def _checked_with(plan: Any, unit: PrivacyUnit) -> tuple[str, list[str]]:
    """The mechanism a verified plan's figures are of and the accountants its verifier recomputed
    them with: a client plan's from its ledger (``planner.ledger.stated_mechanism``,
    ``stated_accountants``; docs/ledger.md §5), another unit's its own mechanism and its plan's
    accountant (none for a metric plan, whose leakages add)."""
    from planner import ledger as plan_ledger  # start-up time (above)

    if unit.secagg_mechanisms:
        return plan_ledger.stated_mechanism(plan), list(plan_ledger.stated_accountants(plan))
    accountant = getattr(plan, "accountant", None)
    return unit.mechanism, [] if accountant is None else [str(accountant)]


def _sweep(args: argparse.Namespace, path: str) -> tuple[Any, str]:
    from planner.loading import load_scenario  # start-up time (above)
    from planner.report import sweep_text
    from planner.sweep import plot_sweep, sweep, swept_epsilon

    _reject(args, ("rounds_done", "changes", "parent_plan_id", "secagg_mechanism", "out"), "plan sweep")
    if args.group is None:
        raise InvalidInputError("--group", "sweep needs --group ID")
    if args.epsilons is None:
        raise InvalidInputError("--epsilons", "sweep needs --epsilons, e.g. 0.5,1,2,4,8")
    if args.method == "compare":
        raise InvalidInputError("--method", "sweep takes one method, not compare")
    epsilons = []
    for index, part in enumerate(args.epsilons.split(",")):
        try:
            # the sweep's own check (a positive finite number), before the scenario is read
            epsilons.append(swept_epsilon(part.strip(), index))
        except InvalidInputError as exc:
            raise InvalidInputError("--epsilons", exc.reason) from None
    scenario = _with_accountant(load_scenario(path), args.accountant)
    result = sweep(scenario, args.group, epsilons, args.method or "gdpfed_plus")
    text = sweep_text(result)
    if args.plot:
        text += f"\nplot written to {plot_sweep(result, args.plot)}"
    return result, text


def _with_accountant(scenario: Any, accountant: str | None) -> Any:
    """``scenario`` with ``--accountant``'s accountant; refused, naming the option, for a unit
    without one (a metric plan's leakage is no epsilon, docs/metric-privacy.md): pydantic
    would blame an ``accountant`` field the user never wrote in the file."""
    if accountant is None:
        return scenario
    if "accountant" not in type(scenario).model_fields:
        unit = getattr(scenario, "privacy_unit", "this")
        raise InvalidInputError("--accountant", f"{unit} plans have no accountant (their figures are not epsilons); leave it out")
    return type(scenario).model_validate({**scenario.model_dump(), "accountant": accountant})


def _write(plan: Any, out: str | None) -> None:
    if out is None:
        return
    try:
        Path(out).write_text(plan.model_dump_json(indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise InvalidInputError("--out", f"cannot write {out}: {exc.strerror or exc}") from None


def _reject(args: argparse.Namespace, names: tuple[str, ...], command: str) -> None:
    """Options that belong to another form of the command are an error, not silently ignored."""
    for name in names:
        if getattr(args, name) is not None:
            raise InvalidInputError(f"--{name.replace('_', '-')}", f"does not apply to 'gdpfed {command}'")
