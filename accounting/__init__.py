"""Privacy accountants and noise calibration for the Poisson-subsampled Gaussian mechanism.

No torch, no FastAPI: this package imports nothing of the project and is the bottom of
the dependency graph. The maths is in docs/accounting.md.
"""

from accounting.calibration import (
    closed_form_noise_multiplier,
    noise_multiplier,
    noise_multipliers_rdp,
    rounds,
    sampling_rate,
)
from accounting.epsilon import epsilon, epsilon_of_phases
from accounting.errors import GdpfedError, InfeasibleError, InvalidInputError
from accounting.mechanism import Phase
from accounting.results import Accountant, Calibration, EpsilonReport

__all__ = [
    "Accountant",
    "Calibration",
    "EpsilonReport",
    "GdpfedError",
    "InfeasibleError",
    "InvalidInputError",
    "Phase",
    "closed_form_noise_multiplier",
    "epsilon",
    "epsilon_of_phases",
    "noise_multiplier",
    "noise_multipliers_rdp",
    "rounds",
    "sampling_rate",
]
