"""Client noise shares and the fixed-point grid they live on (docs/trainer.md §Rounds).

Every sampled client of pool P adds ``N(0, s_P^2)`` with ``s_P = sigma_P C / sqrt(m_P)``
to its clipped update. Secure aggregation unmasks the pool sum only with at least
``m_P`` survivors, so the released sum carries noise variance ``n s_P^2 >= sigma_P^2 C^2``
per coordinate (``n`` survivors). Dividing by the whole population's expected count
instead of ``m_P`` is the classic bug that under-noises every pool; ``check_pool_noise``
refuses a plan whose shares would release less than the pool's ``noise_std``.

Encoding: a client's clipped update and its noise share are each rounded to the grid
``Z / scale`` (``scale`` a power of two) before masking, so the vector handed to secure
aggregation is exactly representable and the protocol's own encoding is lossless.
The update is clipped to ``C - sqrt(d)/scale`` and then rounded with unbiased randomised
rounding, whose error has norm below ``sqrt(d)/scale``: the encoded update's norm is at
most ``C`` with certainty, so the sensitivity of the pool sum stays ``C`` after encoding.
The noise share is rounded independently of the data.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
from scipy.special import ndtri

from accounting.errors import InvalidInputError

# The per-run probability that any noise coordinate exceeds the secure-aggregation value
# bound. A sample that exceeds the bound stops the run (never clamped: clamping a noise
# share would change the released distribution); see ``noise_tail_multiplier``.
BOUND_FAILURE_PROBABILITY = 1e-9

# Resolution of the grid relative to the smallest scale of interest: the noise share
# std, and the typical coordinate of a clipped update ``C / sqrt(d)``. 2^-12 keeps the
# rounding error four orders of magnitude below both.
GRID_BITS_BELOW_SIGNAL = 12


def noise_share_std(noise_multiplier: float, clip_norm: float, secagg_threshold: int) -> float:
    """``sigma_P C / sqrt(m_P)``: the std of one client's share (docs/trainer.md §Rounds).

    ``m_P`` shares (the fewest a pool sum is ever released with) add up to variance
    ``sigma_P^2 C^2``; more survivors only add noise.
    """
    if noise_multiplier < 0 or not math.isfinite(noise_multiplier):
        raise InvalidInputError("noise_multiplier", f"must be finite and >= 0, got {noise_multiplier}")
    if clip_norm <= 0 or not math.isfinite(clip_norm):
        raise InvalidInputError("clip_norm", f"must be finite and > 0, got {clip_norm}")
    if secagg_threshold < 1:
        raise InvalidInputError("secagg_threshold", f"must be >= 1, got {secagg_threshold}")
    return noise_multiplier * clip_norm / math.sqrt(secagg_threshold)


def check_pool_noise(
    pool_id: str, noise_std: float, share_std: float, secagg_threshold: int
) -> None:
    """Refuse a pool whose ``m_P`` shares release less noise than its ``noise_std``.

    Requires ``m_P * share_std^2 >= noise_std^2`` (relative tolerance 1e-9 for the
    rounding of the plan's JSON numbers).
    """
    released = secagg_threshold * share_std**2
    needed = noise_std**2
    if released < needed * (1.0 - 1e-9):
        raise InvalidInputError(
            f"pools.{pool_id}.noise_share_std",
            f"{share_std:.6g} x sqrt(secagg_threshold={secagg_threshold}) releases std "
            f"{math.sqrt(released):.6g} < the pool's noise_std {noise_std:.6g}: the plan "
            "under-noises this pool",
        )


def noise_tail_multiplier(draws: float, failure_probability: float = BOUND_FAILURE_PROBABILITY) -> float:
    """The smallest ``z`` with ``P(max of draws |N(0,1)| samples > z) <= failure_probability``.

    Union bound: ``draws * P(|N(0,1)| > z) = draws * 2 Phi(-z) <= p``, so
    ``z = -Phi^-1(p / (2 draws))``. For ``1e10`` draws and ``p = 1e-9`` this is about 9.4.
    """
    if draws < 1:
        draws = 1.0
    if not 0 < failure_probability < 1:
        raise InvalidInputError("failure_probability", f"must be in (0, 1), got {failure_probability}")
    return float(-ndtri(failure_probability / (2.0 * draws)))


def grid_scale(clip_norm: float, share_std: float, dim: int) -> float:
    """A power of two ``scale`` so the grid step ``1/scale`` is 2^-12 of the finest signal.

    The finest signal is ``min(share_std, clip_norm / sqrt(dim))`` (the noise share, or a
    typical coordinate of a clipped update); ``share_std = 0`` (no noise) uses the latter.
    """
    finest = clip_norm / math.sqrt(max(dim, 1))
    if share_std > 0:
        finest = min(finest, share_std)
    exponent = math.ceil(GRID_BITS_BELOW_SIGNAL - math.log2(finest))
    return float(2.0 ** max(exponent, 0))


def value_bound(clip_norm: float, share_std: float, scale: float, tail_multiplier: float) -> float:
    """Per-coordinate bound on a client's encoded vector: ``C + z s_P + 2 / scale``.

    ``|x_j| <= ||x||_2 <= C`` for the encoded clipped update; ``|round(n_j)| <= |n_j| +
    1/scale`` for the noise share, which exceeds ``z s_P`` only with the probability
    ``noise_tail_multiplier`` was chosen for. One more grid step absorbs float rounding.
    """
    return clip_norm + tail_multiplier * share_std + 2.0 / scale


def rounding_margin(dim: int, scale: float) -> float:
    """``sqrt(d) / scale``: the largest L2 norm randomised rounding can add to a ``d``-vector."""
    return math.sqrt(dim) / scale


def encode_clipped(row: np.ndarray, clip_norm: float, scale: float, rng: np.random.Generator) -> np.ndarray:
    """Clip ``row`` to ``C - sqrt(d)/scale``, then randomised rounding to ``Z / scale``.

    Each coordinate rounds up with probability equal to its fractional part (unbiased) and
    moves by less than ``1/scale``, so the rounding error has norm below ``sqrt(d)/scale``
    and the encoded vector's norm stays at most ``C``: the pool sum's sensitivity is ``C``
    after encoding, with certainty. ``grid_scale`` makes the margin at most ``C / 2^12``.
    Returns the grid integers as float64 (exact: well below 2^53).
    """
    margin = rounding_margin(row.shape[0], scale)
    if margin >= clip_norm:
        raise InvalidInputError("scale", f"grid step too coarse for clip norm {clip_norm} in {row.shape[0]} dimensions")
    # Not np.linalg.norm: its BLAS dot contends with torch's threads (20 ms per 5e4-vector
    # measured under load, against 0.4 ms for einsum's own loop).
    norm = math.sqrt(float(np.einsum("i,i->", row, row)))
    inner = clip_norm - margin
    scaled = row * (scale * min(1.0, inner / norm) if norm > 0 else scale)
    floor = np.floor(scaled)
    return floor + (rng.random(row.shape[0]) < (scaled - floor))


def draw_noise_share(dim: int, share_std: float, scale: float, rng: np.random.Generator) -> np.ndarray:
    """One client's noise share on the grid: ``round(N(0, share_std^2) * scale)`` as float64 integers."""
    if share_std == 0:
        return np.zeros(dim, dtype=np.float64)
    return np.rint(rng.standard_normal(dim) * (share_std * scale))


def total_draws(dim: int, clients_per_round: Iterable[float], rounds: int) -> float:
    """Expected number of noise coordinates drawn over a run (for ``noise_tail_multiplier``)."""
    return float(dim) * max(sum(clients_per_round), 1.0) * max(rounds, 1)
