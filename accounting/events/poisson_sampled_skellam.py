"""The Poisson-subsampled distributed Skellam mechanism (docs/accounting.md §11.6).

The discrete path of secure aggregation (docs/secure-aggregation.md, "Discrete noise:
the distributed Skellam mechanism"): each included client sends its update scaled,
rotated and rounded to an integer vector of L2 norm at most ``l2_sensitivity`` (and L1
norm at most ``l1_sensitivity``; conditional rounding makes both bounds exact), plus an
integer Skellam noise share; the server learns the integer sum plus Skellam noise of
total per-coordinate ``variance`` (the honest survivors' shares; sums of independent
Skellams are Skellam). Everything is in grid units (integers): the sensitivities and
the variance are those of the integer vectors, not of the real-valued update.

RDP, for an integer order a >= 2, without sampling (Agarwal, Kairouz, Liu 2021, "The
Skellam Mechanism for Differentially Private Federated Learning", Thm 3.5 / Cor 3.6):

    e(a) = a D2^2 / (2 mu) + min(((2a - 1) D2^2 + 6 D1) / (4 mu^2), 3 D1 / (2 mu)).

Poisson subsampling at rate q: Zhu and Wang 2019 ("Poisson Subsampled Renyi
Differential Privacy", Thm 6, the general upper bound for integer orders), taking the
smaller of it and e(a). A fractional order takes the value of the next integer order
(RDP is non-decreasing in the order, so that is an upper bound). ``steps`` releases
compose by adding curves (docs/accounting.md §4).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import pydantic

from accounting.events.base import ApproximateDpEvent
from accounting.rdp import SMALL_LOG_A, OrderGrid
from accounting.validation import NoiseMultiplier, SamplingRate, Steps

# Positive finite reals, the same domain as a noise multiplier.
_Positive = NoiseMultiplier


def skellam_rdp(order: int, variance: float, l2_sensitivity: float, l1_sensitivity: float) -> float:
    """The Skellam mechanism's RDP at an integer order >= 2 (Agarwal et al. 2021; docs/accounting.md §11.6)."""
    a, mu, d2sq, d1 = float(order), variance, l2_sensitivity**2, l1_sensitivity
    return a * d2sq / (2.0 * mu) + min(((2.0 * a - 1.0) * d2sq + 6.0 * d1) / (4.0 * mu * mu), 3.0 * d1 / (2.0 * mu))


def subsampled_rdp(order: int, sampling_rate: float, base: np.ndarray) -> float:
    """Zhu and Wang 2019's general bound for Poisson subsampling at an integer order >= 2.

    ``base[l]`` is the unsampled mechanism's RDP at order l (entries 2 .. order used).
    The bound is

        1/(a-1) log[ (1-q)^(a-1) (a q - q + 1) + C(a,2) q^2 (1-q)^(a-2) e^(e(2))
                     + 3 sum_{l=3}^{a} C(a,l) q^l (1-q)^(a-l) e^((l-1) e(l)) ],

    and the smaller of it and ``base[order]`` is returned (docs/accounting.md §11.6).
    """
    # start-up time: importing scipy.special costs every command ~0.1 s (accounting.events is
    # imported by every accountant), so the Skellam bound imports it when it is first computed
    from scipy.special import gammaln, logsumexp

    a, q = order, sampling_rate
    if q >= 1.0:
        return float(base[a])
    log_q, log_1q = math.log(q), math.log1p(-q)
    ls = np.arange(2, a + 1, dtype=float)
    log_binom = gammaln(a + 1.0) - gammaln(ls + 1.0) - gammaln(a - ls + 1.0)
    terms = log_binom + ls * log_q + (a - ls) * log_1q + (ls - 1.0) * base[2 : a + 1]
    terms[1:] += math.log(3.0)
    first = (a - 1) * log_1q + math.log(a * q - q + 1.0)
    log_total = float(logsumexp(np.concatenate(([first], terms))))
    if log_total < SMALL_LOG_A:
        # The bracket is 1 + something that may be below double precision at tiny q (the
        # plain log rounds it to 0): since sum_l C(a,l) q^l (1-q)^(a-l) = 1 and ``first`` is
        # its l = 0, 1 terms, bracket - 1 = sum_{l>=2} C(a,l) q^l (1-q)^(a-l) (c_l e^(...) - 1)
        # with c_2 = 1, c_l = 3, all terms >= 0: sum that and take log1p (docs/accounting.md §2.4).
        exponent = (ls - 1.0) * base[2 : a + 1]  # log(c_l) + (l-1) e(l)
        exponent[1:] += math.log(3.0)
        weights = log_binom + ls * log_q + (a - ls) * log_1q
        with np.errstate(divide="ignore"):
            log_excess = exponent + np.log(-np.expm1(-exponent))  # log(e^x - 1), -inf where x = 0
        log_total = math.log1p(math.exp(float(logsumexp(weights + log_excess))))
    return min(float(base[a]), log_total / (a - 1))


class PoissonSampledSkellam(ApproximateDpEvent):
    """``steps`` rounds of the Poisson(``sampling_rate``)-subsampled distributed Skellam mechanism.

    ``variance`` is the per-coordinate Skellam variance the server cannot remove (the
    honest survivors' shares together); ``l2_sensitivity`` and ``l1_sensitivity`` bound
    one client's rounded integer vector. All three are in grid units.
    """

    kind: Literal["poisson_sampled_skellam"] = "poisson_sampled_skellam"
    sampling_rate: SamplingRate
    variance: _Positive
    l2_sensitivity: _Positive
    l1_sensitivity: _Positive
    steps: Steps

    @pydantic.model_validator(mode="after")
    def _l1_covers_l2(self) -> PoissonSampledSkellam:
        # Any vector's L1 norm is at least its L2 norm: a smaller L1 bound cannot hold.
        if self.l1_sensitivity < self.l2_sensitivity:
            raise ValueError("l1_sensitivity must be at least l2_sensitivity (an L1 norm is never below the L2 norm)")
        return self

    def rdp(self, grid: OrderGrid) -> np.ndarray:
        """steps * the subsampled Skellam RDP at every order, fractional ones at the next integer (§11.6)."""
        orders = np.asarray(grid.orders, dtype=float)
        ceilings = np.maximum(np.ceil(orders).astype(int), 2)
        top = int(ceilings.max())
        base = np.zeros(top + 1)
        for a in range(2, top + 1):
            base[a] = skellam_rdp(a, self.variance, self.l2_sensitivity, self.l1_sensitivity)
        values = {a: subsampled_rdp(a, self.sampling_rate, base) for a in np.unique(ceilings).tolist()}
        return self.steps * np.array([values[a] for a in ceilings.tolist()])
