"""The ``gdpfed`` command line: one entry point, one subcommand per package.

Each package owns its subcommand in its own ``cli`` module, which exposes
``register(subparsers)``. ``register`` adds a parser (with its own ``--json`` flag) and
sets ``handler``, a function ``handler(args) -> (data, text) | None``: ``data`` is a
pydantic model or a JSON-serialisable value printed with ``--json``, ``text`` is what a
person reads otherwise. Handlers raise the project's errors (or
pydantic's ``ValidationError``) and never print them: this module maps them, once, to
a one-line message on stderr and exit code 2. Heavy imports (torch, uvicorn) happen
inside handlers so that ``gdpfed account`` works without the trainer's extras.

The dispatcher lives in ``app`` because it is the one layer allowed to know every
package; it reaches the trainer only through ``trainer.cli``, the trainer's public
command-line entry.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import pydantic

from accounting.errors import GdpfedError

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

# Subcommand name -> module with ``register(subparsers)``. Modules are imported when the
# parser is built; they must keep heavy imports inside their handlers.
SUBCOMMAND_MODULES: dict[str, str] = {
    "account": "accounting.cli",
    "plan": "planner.cli",
    "serve": "app.serve_cli",
    "train": "trainer.cli",
    "bench": "bench.cli",
    "experiment": "trainer.experiments.cli",
}


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit code 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


def format_validation_error(exc: pydantic.ValidationError) -> str:
    """One line naming the first offending field (``groups.1.epsilon: ...``)."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    location = ".".join(str(part) for part in first.get("loc", ())) or "input"
    message = first.get("msg", "invalid value")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{location}: {message}{more}"


def build_parser(modules: dict[str, str] | None = None) -> OneLineArgumentParser:
    parser = OneLineArgumentParser(
        prog="gdpfed",
        description="Privacy-budget planning for federated learning with heterogeneous "
        "client-level differential privacy.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name in (modules or SUBCOMMAND_MODULES).items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            # A subcommand whose package is not built yet, or whose optional extra is
            # missing, is listed but explains itself instead of breaking the others.
            _register_unavailable(subparsers, name, missing_module_message(exc))
            continue
        module.register(subparsers)
    return parser


# Which extra of pyproject.toml provides a module the core install lacks (tests/test_extras.py
# checks this table against pyproject.toml, so the hint cannot drift from the packaging).
MODULE_EXTRAS: dict[str, str] = {
    "torch": "trainer",
    "cryptography": "trainer",
    "Crypto": "trainer",
    "sklearn": "trainer",
    "tqdm": "trainer",
    "psycopg": "postgres",
    "cvxpy": "dev",
    "opacus": "dev",
    "dp_accounting": "dev",
}


def missing_module_message(exc: ModuleNotFoundError) -> str:
    """``needs the 'trainer' extra (torch is not installed): pip install 'gdpfed[trainer]'``."""
    module = (exc.name or "").split(".")[0]
    extra = MODULE_EXTRAS.get(module)
    if extra is None:
        return f"a required module is not installed: {module or exc}"
    return f"needs the {extra!r} extra ({module} is not installed): pip install 'gdpfed[{extra}]'"


def _register_unavailable(subparsers: Any, name: str, reason: str) -> None:
    sub = subparsers.add_parser(name, help=f"(unavailable: {reason})", add_help=False)
    sub.add_argument("rest", nargs=argparse.REMAINDER)

    def handler(args: argparse.Namespace) -> None:
        raise GdpfedError(f"'gdpfed {name}' is unavailable here: {reason}")

    sub.set_defaults(handler=handler)


def _emit(output: tuple[Any, str], as_json: bool) -> None:
    data, text = output
    if as_json:
        if isinstance(data, pydantic.BaseModel):
            text = data.model_dump_json(indent=2)
        else:
            text = json.dumps(data, indent=2, default=_json_default)
        sys.stdout.write(text + "\n")
    elif text:
        sys.stdout.write(text.rstrip("\n") + "\n")


def _json_default(value: Any) -> Any:
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json")
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def run(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, run the handler, map errors to exit codes. Returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], tuple[Any, str] | None] = args.handler
    try:
        output = handler(args)
    except GdpfedError as exc:
        sys.stderr.write(f"gdpfed {args.command}: error: {exc.message}\n")
        # 2 for input errors; a few errors carry their own code (3: reporting to the
        # service stopped or left reports undelivered, docs/trainer.md §CLI)
        return int(getattr(exc, "exit_code", EXIT_USAGE))
    except pydantic.ValidationError as exc:
        sys.stderr.write(f"gdpfed {args.command}: error: {format_validation_error(exc)}\n")
        return EXIT_USAGE
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        sys.stderr.write(f"gdpfed {args.command}: error: {exc.strerror}: {exc.filename}\n")
        return EXIT_USAGE
    except ModuleNotFoundError as exc:
        # a subcommand whose optional extra is missing (torch is imported in the handler)
        sys.stderr.write(f"gdpfed {args.command}: error: {missing_module_message(exc)}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write(f"gdpfed {args.command}: interrupted\n")
        return EXIT_INTERRUPTED
    if output is not None:
        _emit(output, bool(getattr(args, "json", False)))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> NoReturn:
    raise SystemExit(run(argv))


if __name__ == "__main__":
    main()
