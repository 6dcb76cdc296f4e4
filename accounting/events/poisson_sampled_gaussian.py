"""The Poisson-subsampled Gaussian: a phase of client-level DP rounds (docs/accounting.md §1).

Each client is included in a step independently with probability ``sampling_rate``; the
sum of clipped updates gets N(0, (noise_multiplier * clip_norm)^2 I); neighbouring
datasets add or remove one client's whole data. ``steps`` such steps at fixed parameters
form one event (a *phase*). dp-accounting writes it
``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(sigma)), steps)``.

Plan documents of schema version 1 hold these as ``{sampling_rate, noise_multiplier,
steps}`` with no ``kind``: the kind is optional in JSON and never written, so those
documents load unchanged and dump byte for byte as before.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pydantic

from accounting import rdp as rdp_math
from accounting.events.base import ApproximateDpEvent
from accounting.validation import NoiseMultiplier, SamplingRate, Steps


class PoissonSampledGaussian(ApproximateDpEvent):
    """``steps`` steps of the Poisson(``sampling_rate``)-subsampled Gaussian with ``noise_multiplier``."""

    kind: Literal["poisson_sampled_gaussian"] = pydantic.Field("poisson_sampled_gaussian", exclude=True)
    sampling_rate: SamplingRate
    noise_multiplier: NoiseMultiplier
    steps: Steps

    def rdp(self, grid: rdp_math.OrderGrid) -> np.ndarray:
        """steps * R_{q, sigma}(alpha) (docs/accounting.md §2, §4)."""
        return self.steps * rdp_math.rdp_curve(self.sampling_rate, self.noise_multiplier, grid)


# The name the code and the docs used before events existed; plan documents still call these "phases".
Phase = PoissonSampledGaussian
