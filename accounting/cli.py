"""``gdpfed account``: epsilon and the inverse questions from the command line.

docs/accounting.md §10. Values are parsed as strings and validated by the request models
of :mod:`accounting.requests`, so ``--epsilon nan`` or ``--epsilon abc`` is one line naming
``epsilon`` and exit code 2 (mapped in app/cli.py).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, get_args

from accounting.choices import DEFAULT_ACCOUNTANT, AccountantName

if TYPE_CHECKING:
    from accounting.results import Calibration, EpsilonReport


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "account",
        description="Privacy accounting of the Poisson-subsampled Gaussian mechanism "
        "(client-level add/remove adjacency). See docs/accounting.md.",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    questions = parser.add_subparsers(dest="question", metavar="QUESTION", required=True)

    sub = questions.add_parser("epsilon", help="epsilon spent by T rounds")
    _add(sub, "--sampling-rate", "--noise-multiplier", "--rounds", "--delta")
    _accountant(sub)
    sub.set_defaults(handler=_handle, request="epsilon")

    sub = questions.add_parser("noise-multiplier", help="smallest noise multiplier meeting a target epsilon")
    _add(sub, "--sampling-rate", "--rounds", "--epsilon", "--delta")
    _accountant(sub)
    sub.add_argument("--raw", action="store_true", help="closed_form: return the formula's sigma even if rdp rejects it")
    sub.set_defaults(handler=_handle, request="noise_multiplier")

    sub = questions.add_parser("sampling-rate", help="largest sampling rate meeting a target epsilon")
    _add(sub, "--noise-multiplier", "--rounds", "--epsilon", "--delta")
    _accountant(sub)
    sub.set_defaults(handler=_handle, request="sampling_rate")

    sub = questions.add_parser("rounds", help="most rounds meeting a target epsilon")
    _add(sub, "--sampling-rate", "--noise-multiplier", "--epsilon", "--delta")
    _accountant(sub)
    sub.set_defaults(handler=_handle, request="rounds")


def _add(parser: argparse.ArgumentParser, *flags: str) -> None:
    for flag in flags:
        parser.add_argument(flag, type=str, required=True, metavar=flag.lstrip("-").replace("-", "_").upper())
    # ``--json`` is accepted after the question too (``gdpfed account epsilon ... --json``).
    if not any(action.dest == "json" for action in parser._actions):
        parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the result as JSON")


def _accountant(parser: argparse.ArgumentParser) -> None:
    # Every question takes every accountant: the choices are the registry's names (a test
    # keeps AccountantName equal to its keys), read from accounting.choices so that the parser
    # loads no accountant, numpy or pydantic (start-up time: `gdpfed account --help`).
    parser.add_argument(
        "--accountant", choices=get_args(AccountantName), default=DEFAULT_ACCOUNTANT, help=f"default: {DEFAULT_ACCOUNTANT}"
    )


def _handle(args: argparse.Namespace) -> tuple[EpsilonReport | Calibration, str]:
    # start-up time: the request models (about 16 ms of pydantic) are built for a question,
    # not for `gdpfed account --help`
    from accounting import requests
    from accounting.errors import out_of_float_range

    fields = {
        name: getattr(args, name)
        for name in ("sampling_rate", "noise_multiplier", "rounds", "epsilon", "delta", "accountant")
        if getattr(args, name, None) is not None
    }
    models: dict[str, type[requests.AccountingRequest]] = {
        "epsilon": requests.EpsilonRequest,
        "noise_multiplier": requests.NoiseMultiplierRequest,
        "sampling_rate": requests.SamplingRateRequest,
        "rounds": requests.RoundsRequest,
    }
    model = models[args.request]
    if args.request == "noise_multiplier":
        fields["raw"] = bool(args.raw)
    request = model.model_validate(fields)
    try:
        result = requests.answer(request)
    except ArithmeticError as exc:  # the service's 422 for the same request (app/compute.py)
        raise out_of_float_range(exc) from None
    return result, _text(result)


def _text(result: EpsilonReport | Calibration) -> str:
    from accounting.results import EpsilonReport  # start-up time, as in _handle

    if isinstance(result, EpsilonReport):
        lines = [f"epsilon = {result.epsilon:.6g} at delta = {result.delta:g} ({_used(result)})"]
        if result.upper is not None:
            lines.append(f"prv bounds: lower {result.lower:.6g}, estimate {result.estimate:.6g}, upper {result.upper:.6g}")
        elif result.estimate is not None:
            lines.append(f"closed-form formula epsilon = {result.estimate:.6g}")
        if result.optimal_order is not None:
            lines.append(f"optimal RDP order = {result.optimal_order:g}")
    else:
        answer = {
            "noise_multiplier": f"noise_multiplier = {result.noise_multiplier:.6g}",
            "sampling_rate": f"sampling_rate = {result.sampling_rate:.6g}",
            "rounds": f"rounds = {result.rounds}",
        }[result.solved_for]
        lines = [
            answer,
            f"achieved epsilon = {result.epsilon:.6g} (target {result.target_epsilon:g}) at delta = "
            f"{result.delta:g} ({_used(result)})",
            f"with sampling_rate = {result.sampling_rate:.6g}, noise_multiplier = {result.noise_multiplier:.6g}, "
            f"rounds = {result.rounds}",
        ]
        if not result.sound:
            lines.append("WARNING: the closed form misses its target under rdp (not sound)")
        elif result.replaced:
            lines.append("the closed form missed its target under rdp; this is the rdp answer instead")
    if result.reason:
        lines.append(f"note: {result.reason}")
    return "\n".join(lines)


def _used(result: EpsilonReport | Calibration) -> str:
    if result.accountant_used == result.accountant:
        return f"accountant {result.accountant}"
    return f"accountant {result.accountant}, answered by {result.accountant_used}" + (
        " after a fallback" if result.fallback else ""
    )
