"""The ``gdpfed`` command line: one entry point, one subcommand per package.

Each package owns its subcommand in its own ``cli`` module, which exposes
``register(subparsers)``. ``register`` adds a parser (with its own ``--json`` flag) and
sets ``handler``, a function ``handler(args) -> (data, text) | None``: ``data`` is a
pydantic model or a JSON-serialisable value printed with ``--json``, ``text`` is what a
person reads otherwise. Handlers raise the project's errors (or
pydantic's ``ValidationError``) and never print them: this module maps them, once, to
a one-line message on stderr and exit code 2. Heavy imports (torch, uvicorn) happen
inside handlers so that ``gdpfed account`` works without the trainer's extras.

Subcommand modules are imported lazily: the parser registers only the subcommand named
on the command line (the others are listed with their one-line help from
``SUBCOMMAND_HELP``), and this module imports nothing of the project at import time, so
``gdpfed --help`` loads no planner, scipy or torch and ``gdpfed account ...`` loads only
the accountant (docs/architecture.md, "Command line"; ``gdpfed bench cli`` times it).

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
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    import pydantic

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

# Subcommand name -> module with ``register(subparsers)``. Only the module of the
# subcommand being run is imported; it must keep heavy imports inside its handler.
SUBCOMMAND_MODULES: dict[str, str] = {
    "account": "accounting.cli",
    "plan": "planner.cli",
    "serve": "app.serve_cli",
    "train": "trainer.cli",
    "bench": "bench.cli",
    "experiment": "trainer.experiments.cli",
    "flower": "trainer.flower.cli",
    "audit": "trainer.audit_cli",
}

# The one-line summary ``gdpfed --help`` lists for each subcommand (without importing it).
SUBCOMMAND_HELP: dict[str, str] = {
    "account": "privacy accounting: epsilon, noise multiplier, sampling rate, rounds",
    "plan": "plan per-group sampling rates, noise and sparsity (GDPFed+ and the methods around it)",
    "serve": "run the HTTP planning service (uvicorn)",
    "train": "train a model with a plan's privacy mechanism (PyTorch simulation)",
    "bench": "run a benchmark suite side by side with its peers",
    "experiment": "run an experiment configuration (methods x datasets x settings x seeds) and report it",
    "flower": "run a plan on Flower (flwr): app bundle, loopback deployment, in-process dry run",
    "audit": "empirical privacy audit: a Clopper-Pearson lower bound on epsilon of a release (discrete, client, silo, metric)",
}


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit code 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


def format_validation_error(exc: pydantic.ValidationError) -> str:
    """One line naming the first offending field (``groups.1.epsilon: ...``)."""
    from accounting.errors import validation_error_line

    location, message = validation_error_line(exc.errors(include_url=False))
    return f"{location or 'input'}: {message}"


def chosen_subcommand(argv: Sequence[str], names: Sequence[str]) -> str | None:
    """The subcommand ``argv`` runs: its first word, if it names one (top-level flags are only -h)."""
    first = next((word for word in argv if not word.startswith("-")), None)
    return first if first in names else None


def build_parser(modules: dict[str, str] | None = None, argv: Sequence[str] | None = None) -> OneLineArgumentParser:
    """The ``gdpfed`` parser; with ``argv``, only the subcommand it names is imported and registered."""
    parser = OneLineArgumentParser(
        prog="gdpfed",
        description="Privacy-budget planning for federated learning with heterogeneous "
        "client-level differential privacy.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    modules = modules or SUBCOMMAND_MODULES
    chosen = None if argv is None else chosen_subcommand(argv, list(modules))
    for name, module_name in modules.items():
        if argv is not None and name != chosen:
            _register_listed(subparsers, name)
            continue
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
    "flwr": "flower",
}


def missing_module_message(exc: ModuleNotFoundError) -> str:
    """``needs the 'trainer' extra (torch is not installed): pip install 'gdpfed[trainer]' (from a
    checkout: pip install -e ".[trainer]")`` (``accounting.errors.install_hint``)."""
    from accounting.errors import install_hint

    module = (exc.name or "").split(".")[0]
    extra = MODULE_EXTRAS.get(module)
    if extra is None:
        return f"a required module is not installed: {module or exc}"
    return f"needs the {extra!r} extra ({module} is not installed): {install_hint(extra)}"


def _register_listed(subparsers: Any, name: str) -> None:
    """A subcommand that is listed in the help but not run by this command line."""
    sub = subparsers.add_parser(name, help=SUBCOMMAND_HELP.get(name, ""), add_help=False)
    sub.add_argument("rest", nargs=argparse.REMAINDER)


def _register_unavailable(subparsers: Any, name: str, reason: str) -> None:
    sub = subparsers.add_parser(name, help=f"(unavailable: {reason})", add_help=False)
    sub.add_argument("rest", nargs=argparse.REMAINDER)

    def handler(args: argparse.Namespace) -> None:
        from accounting.errors import GdpfedError

        raise GdpfedError(f"'gdpfed {name}' is unavailable here: {reason}")

    sub.set_defaults(handler=handler)


def _emit(output: tuple[Any, str], as_json: bool) -> None:
    import pydantic

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
    import pydantic

    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json")
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def run(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, run the handler, map errors to exit codes. Returns the exit code."""
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv=words)
    args = parser.parse_args(words)
    import pydantic

    from accounting.errors import GdpfedError, message_line

    handler: Callable[[argparse.Namespace], tuple[Any, str] | None] = args.handler
    try:
        output = handler(args)
    except GdpfedError as exc:
        sys.stderr.write(f"gdpfed {args.command}: error: {message_line(exc.message)}\n")
        # 2 for input errors; a few errors carry their own code (3: reporting to the
        # service stopped or left reports undelivered, docs/trainer.md §CLI)
        return int(getattr(exc, "exit_code", EXIT_USAGE))
    except pydantic.ValidationError as exc:
        sys.stderr.write(f"gdpfed {args.command}: error: {message_line(format_validation_error(exc))}\n")
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
