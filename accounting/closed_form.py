"""The GDPFed paper's closed-form noise bound, raw (docs/accounting.md §6).

sigma^2 >= 7 q^2 T (epsilon + 2 ln(1/delta)) / epsilon^2  (the paper's Theorem 1, from the
Fed-SMP analysis). It only holds under its lemma's conditions and under-noises outside
them, so callers never use these numbers unchecked: :mod:`accounting.calibration` checks
every closed-form sigma with ``rdp`` (docs/accounting.md §6.2). This module is just the formula.
"""

from __future__ import annotations

import math
import sys


def closed_form_sigma(sampling_rate: float, rounds: float, epsilon: float, delta: float) -> float:
    """sqrt(7 q^2 T (eps + 2 ln(1/delta)) / eps^2). Inputs are assumed validated."""
    log_inv_delta = -math.log(delta)
    return math.sqrt(7.0 * sampling_rate**2 * rounds * (epsilon + 2.0 * log_inv_delta)) / epsilon


def closed_form_epsilon(sampling_rate: float, noise_multiplier: float, rounds: float, delta: float) -> float:
    """The epsilon at which the formula is tight for this sigma (its inverse).

    sigma^2 eps^2 - b eps - 2 b ln(1/delta) = 0 with b = 7 q^2 T, positive root.
    """
    b = 7.0 * sampling_rate**2 * rounds
    a = noise_multiplier**2
    log_inv_delta = -math.log(delta)
    return (b + math.sqrt(b * b + 8.0 * a * b * log_inv_delta)) / (2.0 * a)


def closed_form_sampling_rate(noise_multiplier: float, rounds: float, epsilon: float, delta: float) -> float:
    """The q at which the formula is tight (may exceed 1; the caller caps and says so)."""
    log_inv_delta = -math.log(delta)
    return noise_multiplier * epsilon / math.sqrt(7.0 * rounds * (epsilon + 2.0 * log_inv_delta))


def closed_form_rounds(sampling_rate: float, noise_multiplier: float, epsilon: float, delta: float) -> int:
    """The largest integer T the formula allows (0 if not even one round); ``sys.maxsize``
    where it bounds none (q^2 underflows to 0, or the count overflows: q below about 1e-154)."""
    log_inv_delta = -math.log(delta)
    denominator = 7.0 * sampling_rate**2 * (epsilon + 2.0 * log_inv_delta)
    if denominator == 0.0:
        return sys.maxsize
    value = noise_multiplier**2 * epsilon**2 / denominator
    if value >= sys.maxsize:
        return sys.maxsize
    return int(math.floor(value * (1 + 1e-12)))
