"""Privacy events, accountants and noise calibration.

No torch, no FastAPI: this package imports nothing of the project and is the bottom of
the dependency graph. Events (:mod:`accounting.events`) record what was released;
accountants (:mod:`accounting.accountants`, one registry) turn them into epsilon and
answer the inverse questions; metric leakage, a different notion, adds up in
:mod:`accounting.metric`. The maths is in docs/accounting.md.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from accounting.lazy import LazyPackage

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
# the accountants (docs/architecture.md, "Command line"; accounting/lazy.py reads them).
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


sys.modules[__name__].__class__ = LazyPackage

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
