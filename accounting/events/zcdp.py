"""A mechanism satisfying rho-zCDP, ``steps`` times (docs/accounting.md §11.3).

rho-zCDP (Bun and Steinke 2016) is RDP ``alpha * rho`` at every order alpha > 1, so
``steps`` of them compose to the RDP curve ``alpha * rho * steps``; the conversion to
(epsilon, delta) is that of every RDP curve (docs/accounting.md §3). dp-accounting calls
it ``ZCDpEvent(rho)`` (with xi = 0), composed ``steps`` times.

The exponential mechanism with a utility of sensitivity ``s``, run at privacy parameter
``epsilon`` (the "report noisy min" cluster selection of IFCA under MR-MTL, Gumbel noise
at scale ``2 s / epsilon``), is ``epsilon^2 / 8``-zCDP (Cesar and Rogers 2021), hence
:meth:`ZeroConcentratedDp.exponential_mechanism`.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from accounting.events.base import ApproximateDpEvent
from accounting.rdp import OrderGrid
from accounting.validation import Epsilon, Steps, validate_count, validate_positive


class ZeroConcentratedDp(ApproximateDpEvent):
    """``steps`` releases, each ``rho``-zCDP (RDP ``alpha * rho`` per release)."""

    kind: Literal["zcdp"] = "zcdp"
    rho: Epsilon  # a positive finite number, like epsilon
    steps: Steps

    def rdp(self, grid: OrderGrid) -> np.ndarray:
        """alpha * rho * steps at every order (docs/accounting.md §11.3)."""
        return grid.orders * (self.rho * self.steps)

    @classmethod
    def exponential_mechanism(cls, epsilon: float, selections: int = 1) -> ZeroConcentratedDp:
        """``selections`` runs of the exponential mechanism at ``epsilon``: rho = epsilon^2 / 8 each."""
        value = validate_positive("epsilon", epsilon)
        return cls(rho=value * value / 8.0, steps=validate_count("selections", selections))
