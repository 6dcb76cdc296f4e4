"""Running a plan on Flower (flwr): the same mechanism, ledger and reporting as ``gdpfed train``.

(docs/flower.md.) ``gdpfed[flower]`` adds flwr; nothing else of gdpfed imports this
package. Flower carries the messages and starts the processes; the privacy mechanism stays
gdpfed's: per-group Poisson sampling on the server, clipping and noise shares on each
client from its own copy of the plan, ``trainer.secagg`` (one session per pool, all pools
in lock-step) over Flower messages, top-k and the fixed denominator on the server, and the
run's ledger, log, checkpoints and service reports from ``trainer.run``.

Modules: ``messages`` (the protocol's records), ``settings`` (run and node
configuration), ``client_app`` (the ClientApp), ``engine`` (the server's round),
``server_app`` (the ServerApp), ``bundle`` (the app directory ``flwr run`` takes),
``testing`` (``LoopbackGrid``, an in-process Grid), ``local`` (a SuperLink and SuperNodes
on loopback), ``cli`` (``gdpfed flower``).
"""

from __future__ import annotations

# The Flower releases this package was written against and tested with (docs/flower.md §1).
# Flower moves fast (ports, Driver -> Grid, the app format and the simulation defaults all
# changed between 1.30 and 1.42), so the bound is tight and checked at start-up. The one
# spelling of the range: the app bundle requires it (trainer.flower.bundle), and
# tests/trainer/flower/test_cli.py holds pyproject.toml's flower extra, which cannot import it, equal.
FLWR_REQUIREMENT = ">=1.41,<1.43"


def check_flwr_version() -> str:
    """The installed flwr version; ``InvalidInputError`` when it is outside ``FLWR_REQUIREMENT``.

    Without flwr this raises ``ModuleNotFoundError`` for ``flwr``, which the command line
    reports as the missing ``flower`` extra.
    """
    from importlib.metadata import PackageNotFoundError, version

    import flwr  # noqa: F401
    from packaging.specifiers import SpecifierSet

    from accounting.errors import InvalidInputError, install_hint

    try:
        installed = version("flwr")
    except PackageNotFoundError:
        raise InvalidInputError("flower", f"flwr is not installed: {install_hint('flower')}") from None
    if installed not in SpecifierSet(FLWR_REQUIREMENT):
        raise InvalidInputError(
            "flower", f"flwr {installed} is installed; gdpfed is tested with flwr{FLWR_REQUIREMENT}"
        )
    return installed
