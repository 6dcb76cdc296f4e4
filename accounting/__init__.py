"""Privacy events, accountants and noise calibration.

No torch, no FastAPI: this package imports nothing of the project and is the bottom of
the dependency graph. Events (:mod:`accounting.events`) record what was released;
accountants (:mod:`accounting.accountants`, one registry) turn them into epsilon and
answer the inverse questions; metric leakage, a different notion, adds up in
:mod:`accounting.metric`. The maths is in docs/accounting.md.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accounting.accountants import ACCOUNTANT_NAMES, ACCOUNTANTS, AccountantName, get_accountant
    from accounting.calibration import (
        closed_form_noise_multiplier,
        noise_multiplier,
        noise_multiplier_exists,
        noise_multipliers,
        noise_multipliers_batch,
        noise_multipliers_rdp,
        rounds,
        sampling_rate,
    )
    from accounting.epsilon import epsilon, epsilon_of_events, epsilon_of_phases, epsilons_of_histories
    from accounting.errors import GdpfedError, InfeasibleError, InvalidInputError
    from accounting.events import (
        ComposedEvent,
        MetricLeakage,
        Phase,
        PoissonSampledGaussian,
        PrivacyEvent,
        ZeroConcentratedDp,
    )
    from accounting.metric import metric_leakage
    from accounting.results import Calibration, EpsilonReport

# Start-up time: the names below are imported from their modules when first read (PEP 562),
# not when the package is, so ``import accounting.errors`` or ``accounting.choices`` (the
# command line's parsers, a refused ``gdpfed train``) loads neither numpy nor pydantic nor
# the accountants (docs/architecture.md, "Command line").
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("ACCOUNTANTS", "ACCOUNTANT_NAMES", "AccountantName", "get_accountant"), "accounting.accountants"),
    **dict.fromkeys(
        ("closed_form_noise_multiplier", "noise_multiplier", "noise_multiplier_exists", "noise_multipliers", "noise_multipliers_batch",
         "noise_multipliers_rdp", "rounds", "sampling_rate"),
        "accounting.calibration",
    ),
    **dict.fromkeys(("epsilon", "epsilon_of_events", "epsilon_of_phases", "epsilons_of_histories"), "accounting.epsilon"),
    **dict.fromkeys(("GdpfedError", "InfeasibleError", "InvalidInputError"), "accounting.errors"),
    **dict.fromkeys(
        ("ComposedEvent", "MetricLeakage", "Phase", "PoissonSampledGaussian", "PrivacyEvent", "ZeroConcentratedDp"),
        "accounting.events",
    ),
    "metric_leakage": "accounting.metric",
    **dict.fromkeys(("Calibration", "EpsilonReport"), "accounting.results"),
}


def __getattr__(name: str) -> Any:
    """The exported ``name``, imported from its module on first use (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'accounting' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


class _Package(types.ModuleType):
    """The package, whose ``epsilon`` stays the function ``accounting.epsilon.epsilon``.

    Importing a submodule binds it on its package (``accounting.epsilon`` = the module
    ``accounting/epsilon.py``); while the package imported its exports eagerly, its own
    ``from accounting.epsilon import epsilon`` came after and rebound the function. Lazily,
    a submodule bound under an exported name is not kept: the export is read instead."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and name in _EXPORTS:
            return  # the export is read instead (``__getattr__``)
        super().__setattr__(name, value)


# A module's class may be a subclass of ModuleType (the language reference, "Customizing
# module attribute access"); only ``__setattr__`` differs.
sys.modules[__name__].__class__ = _Package

__all__ = [
    "ACCOUNTANTS",
    "ACCOUNTANT_NAMES",
    "AccountantName",
    "Calibration",
    "ComposedEvent",
    "EpsilonReport",
    "GdpfedError",
    "InfeasibleError",
    "InvalidInputError",
    "MetricLeakage",
    "Phase",
    "PoissonSampledGaussian",
    "PrivacyEvent",
    "ZeroConcentratedDp",
    "closed_form_noise_multiplier",
    "epsilon",
    "epsilon_of_events",
    "epsilons_of_histories",
    "epsilon_of_phases",
    "get_accountant",
    "metric_leakage",
    "noise_multiplier",
    "noise_multiplier_exists",
    "noise_multipliers",
    "noise_multipliers_batch",
    "noise_multipliers_rdp",
    "rounds",
    "sampling_rate",
]
