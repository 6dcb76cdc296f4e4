"""The discrete distributed mechanism's client and server arithmetic (numpy only, no torch).

docs/secure-aggregation.md, "Discrete noise: the distributed Skellam mechanism". A
client turns its update into an integer vector mod 2^b that secure aggregation can sum:

    clip to C -> scale by s -> pad to d' and rotate (H D) -> conditional randomised
    rounding (L2 norm <= D2) -> + Skellam share -> mod 2^b

and the server turns the modular sum back into an update sum:

    centred residue -> unrotate (D H) -> drop the padding -> divide by s.

Every function takes a leading batch axis (rows are independent vectors), so the
sampler tests and the privacy audit can run many rounds at once. The bounds (D2, b,
d') come from :mod:`planner.discrete`, the one place they are derived. The rotation's
signs are public: they come from the round's public seed, never from a client's data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from planner.discrete import padded_dimension, rounded_l2_bound

if TYPE_CHECKING:
    from planner.discrete import DiscreteMechanism

# Conditional rounding re-draws at most this often. A vector of norm <= C s meets the
# bound on each draw with probability >= 1 - beta = 0.39, so 10,000 failures in a row
# have probability below 1e-2000: reaching the cap means the bound is wrong, not bad luck.
MAX_ROUNDING_DRAWS = 10_000


@dataclass(frozen=True)
class DiscreteParams:
    """What a client and the server of one pool need: all public, all from the plan."""

    clip_norm: float
    scale: float
    dimension: int
    l2_bound: float
    share_variance: float
    bits: int

    @property
    def padded_dimension(self) -> int:
        return padded_dimension(self.dimension)

    @classmethod
    def from_mechanism(cls, mechanism: DiscreteMechanism) -> DiscreteParams:
        return cls(
            clip_norm=mechanism.clip_norm,
            scale=mechanism.scale,
            dimension=mechanism.dimension,
            l2_bound=mechanism.l2_sensitivity,
            share_variance=mechanism.share_variance,
            bits=mechanism.bits,
        )

    @classmethod
    def derived(
        cls, clip_norm: float, scale: float, dimension: int, share_variance: float, bits: int
    ) -> DiscreteParams:
        """Parameters whose L2 bound is :func:`planner.discrete.rounded_l2_bound` (the accounted one)."""
        return cls(clip_norm, scale, dimension, rounded_l2_bound(clip_norm, scale, dimension), share_variance, bits)


def rotation_signs(seed: int, dimension: int) -> np.ndarray:
    """The public random signs D (+-1, length d') of one round, from its public seed."""
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5EC_A66]))
    return rng.integers(0, 2, size=padded_dimension(dimension)).astype(np.float64) * 2.0 - 1.0


def hadamard(values: np.ndarray) -> np.ndarray:
    """The orthonormal Walsh-Hadamard transform (Sylvester order) along the last axis.

    Its length must be a power of two. H is symmetric and orthonormal, so H H = I.
    """
    x = np.array(values, dtype=np.float64)  # a copy: the butterflies work in place
    n = x.shape[-1]
    if n & (n - 1):
        raise ValueError(f"the Hadamard transform needs a power-of-two length, got {n}")
    lead = x.shape[:-1]
    spare = np.empty((*lead, n // 2))
    h = 1
    while h < n:
        blocks = x.reshape(*lead, n // (2 * h), 2, h)
        top, bottom = blocks[..., 0, :], blocks[..., 1, :]
        saved = spare.reshape(top.shape)
        np.copyto(saved, top)
        top += bottom  # a + b
        np.subtract(saved, bottom, out=bottom)  # a - b
        h *= 2
    return x / math.sqrt(n)


def rotate(values: np.ndarray, signs: np.ndarray) -> np.ndarray:
    """H D x with x zero-padded to len(signs) = d'."""
    x = np.asarray(values, dtype=np.float64)
    padded = np.zeros((*x.shape[:-1], signs.shape[-1]))
    padded[..., : x.shape[-1]] = x
    return hadamard(padded * signs)


def unrotate(values: np.ndarray, signs: np.ndarray, dimension: int) -> np.ndarray:
    """D H y, the first ``dimension`` coordinates (the inverse of :func:`rotate`)."""
    return (hadamard(values) * signs)[..., :dimension]


def clip(values: np.ndarray, clip_norm: float) -> np.ndarray:
    """Each row scaled to L2 norm <= ``clip_norm`` (rows already inside unchanged)."""
    x = np.asarray(values, dtype=np.float64)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x * np.minimum(1.0, clip_norm / np.maximum(norms, np.finfo(float).tiny))


def randomised_round(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """floor(x) + Bernoulli(x - floor(x)) per coordinate: unbiased, off by less than 1."""
    floor = np.floor(values)
    return (floor + (rng.random(values.shape) < values - floor)).astype(np.int64)


def conditional_round(values: np.ndarray, l2_bound: float, rng: np.random.Generator) -> np.ndarray:
    """Randomised rounding of each row, re-drawn until the row's L2 norm is <= ``l2_bound``.

    The bound then holds for every row returned, which is what makes the accounted
    sensitivity exact (docs/accounting.md §11.6). RuntimeError if a row misses it
    MAX_ROUNDING_DRAWS times (a bound below the guarantee of planner.discrete).
    """
    x = np.atleast_2d(np.asarray(values, dtype=np.float64))
    out = randomised_round(x, rng)
    pending = np.flatnonzero(np.einsum("ij,ij->i", out, out) > l2_bound * l2_bound)
    draws = 1
    while pending.size:
        if draws >= MAX_ROUNDING_DRAWS:
            raise RuntimeError(f"conditional rounding missed the L2 bound {l2_bound:g} {draws} times")
        again = randomised_round(x[pending], rng)
        ok = np.einsum("ij,ij->i", again, again) <= l2_bound * l2_bound
        out[pending[ok]] = again[ok]
        pending = pending[~ok]
        draws += 1
    return out.reshape(np.shape(values))


def skellam_share(variance: float, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Symmetric Skellam noise of ``variance`` per coordinate: Poisson(v/2) - Poisson(v/2)."""
    half = variance / 2.0
    return rng.poisson(half, size=shape).astype(np.int64) - rng.poisson(half, size=shape).astype(np.int64)


def encode(values: np.ndarray, bits: int) -> np.ndarray:
    """Integers mod 2^b as uint64 (two's complement keeps the residue of a negative value)."""
    return np.asarray(values, dtype=np.int64).astype(np.uint64) & np.uint64((1 << bits) - 1)


def modular_sum(encoded: np.ndarray, bits: int, axis: int = 0) -> np.ndarray:
    """The sum mod 2^b along ``axis`` (uint64 wraps mod 2^64, a multiple of 2^b)."""
    total = np.sum(np.asarray(encoded, dtype=np.uint64), axis=axis, dtype=np.uint64)
    return np.asarray(total & np.uint64((1 << bits) - 1))


def decode(residues: np.ndarray, bits: int) -> np.ndarray:
    """The centred representative of each residue: r - 2^b if r >= 2^(b-1), else r."""
    r = np.asarray(residues, dtype=np.uint64).astype(np.int64)
    return np.where(r >= 1 << (bits - 1), r - (1 << bits), r)


def client_share(
    update: np.ndarray,
    params: DiscreteParams,
    signs: np.ndarray,
    rng: np.random.Generator,
    *,
    noise: bool = True,
) -> np.ndarray:
    """One client's encoded share (rows: independent updates): clip, scale, rotate, round, noise, mod 2^b."""
    scaled = clip(update, params.clip_norm) * params.scale
    rounded = conditional_round(rotate(scaled, signs), params.l2_bound, rng)
    if noise:
        rounded = rounded + skellam_share(params.share_variance, rounded.shape, rng)
    return encode(rounded, params.bits)


def count_share(
    unclipped: np.ndarray, factor: int, share_variance: float, bits: int, rng: np.random.Generator,
    *, noise: bool = True,
) -> np.ndarray:
    """Adaptive clipping's count coordinate of each client, encoded mod 2^b: m (2 b - 1) =
    2 m (b - 1/2) for its bit b (``unclipped``: its update's norm was <= S^t) plus a Skellam
    share of ``share_variance`` (docs/secure-aggregation.md §Discrete noise, "Adaptive clipping").

    An integer, so nothing is rounded: a client moves the released coordinate by m exactly.
    """
    values = np.where(np.asarray(unclipped, dtype=bool), int(factor), -int(factor)).astype(np.int64)
    if noise:
        values = values + skellam_share(share_variance, values.shape, rng)
    return encode(values, bits)


def count_decode(residue_sum: np.ndarray, factor: int, bits: int) -> np.ndarray:
    """The released count sum_i (b_i - 1/2) + Z / (2 m) from the count coordinate's sum mod 2^b."""
    return decode(residue_sum, bits).astype(np.float64) / (2.0 * int(factor))


def server_decode(residue_sum: np.ndarray, params: DiscreteParams, signs: np.ndarray) -> np.ndarray:
    """The released update sum from the modular sum of the survivors' shares."""
    return unrotate(decode(residue_sum, params.bits).astype(np.float64), signs, params.dimension) / params.scale
