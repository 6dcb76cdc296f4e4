"""t-of-m Shamir secret sharing of byte strings over GF(p), p = 2^31 - 1, vectorised in numpy.

``docs/secure-aggregation.md``, "Shamir sharing". A secret of L bytes is cut into L/2
16-bit limbs; each limb a_0 < 2^16 < p is the constant term of its own random polynomial
f(z) = a_0 + a_1 z + ... + a_(t-1) z^(t-1) over GF(p), and share i is (x_i, f(x_i)) for
every limb at once. Any t shares give a_0 by Lagrange interpolation at 0,
a_0 = sum_i y_i prod_(j != i) x_j / (x_j - x_i); t - 1 shares are independent of a_0
(perfect secrecy of Shamir's scheme: for every candidate a_0 exactly one polynomial fits).

Why not PyCryptodome's ``Shamir`` (GF(2^128), 16-byte secrets): it draws its coefficients
from ``get_random_bytes`` (so a simulation cannot reproduce from a seed) and evaluates one
share at a time in Python (about 0.2 s for one 16-byte secret at t = 100, n = 200). This
module is tested against it: both reconstruct the same secrets from any t shares and
neither does from t - 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from accounting.errors import InvalidInputError
from trainer.secagg.prg import uniform_below

PRIME = (1 << 31) - 1
LIMB_BYTES = 2


@dataclass(frozen=True)
class Share:
    """One share: evaluation point x (1 <= x < p) and the limb values f(x), uint32 little-endian."""

    x: int
    data: bytes

    def __reduce__(self) -> tuple[Any, ...]:
        # A plain tuple: ~10^4 shares cross the worker pipes per session (``parallel``).
        return (Share, (self.x, self.data))

    def values(self) -> np.ndarray:
        return np.frombuffer(self.data, dtype="<u4").astype(np.uint64)


def secret_to_limbs(secret: bytes) -> np.ndarray:
    """Bytes (even length) -> 16-bit limbs as uint64 field elements."""
    if len(secret) % LIMB_BYTES:
        raise InvalidInputError("secret", f"length must be a multiple of {LIMB_BYTES} bytes")
    return np.frombuffer(secret, dtype="<u2").astype(np.uint64)


def limbs_to_secret(limbs: np.ndarray) -> bytes:
    """Inverse of ``secret_to_limbs``; a limb >= 2^16 (a wrong reconstruction) is refused."""
    if np.any(limbs >= (1 << 16)):
        raise ValueError("reconstructed limbs are not 16-bit values: the shares are inconsistent")
    return limbs.astype("<u2").tobytes()


def split(secret: bytes, threshold: int, points: Sequence[int], randomness: bytes) -> list[Share]:
    """Shares of ``secret`` at the evaluation ``points`` (distinct, in [1, p)), ``threshold`` of which reconstruct.

    The t - 1 random coefficients per limb are uniform in GF(p) from a ChaCha20 stream
    under the 32-byte ``randomness`` (``keys.derive_bytes`` in simulation, ``os.urandom``
    in a deployment). Every limb is evaluated at every point at once as the product
    V C mod p of the Vandermonde matrix V[i, j] = x_i^j mod p (cached per point set) and
    the coefficient matrix C[j, l] = a_j of limb l (``_evaluate``).
    """
    xs = _check_points(points)
    if not 1 <= threshold <= len(xs):
        raise InvalidInputError("threshold", f"must be in [1, {len(xs)}], got {threshold}")
    limbs = secret_to_limbs(secret)
    coefficients = uniform_below(randomness, (threshold - 1) * limbs.size, PRIME).reshape(
        threshold - 1, limbs.size
    )
    # Row j of C is a_j: the secret's limbs, then the random coefficients a_1 .. a_(t-1).
    values = _evaluate(_vandermonde(tuple(xs), threshold), np.vstack([limbs[None, :], coefficients]))
    data = values.astype("<u4")
    return [Share(x=x, data=row.tobytes()) for x, row in zip(xs, data)]


def _evaluate(vandermonde: np.ndarray, coefficients: np.ndarray) -> np.ndarray:
    """``vandermonde @ coefficients mod p`` exactly in uint64, both operands below p < 2^31.

    Each product would need 62 bits and a sum of t of them overflows 64, so the coefficients
    are split into 16-bit halves, C = 2^16 H + L: a row of V L sums products below 2^47,
    so up to 2^16 terms fit in 64 bits, and likewise V H (H < 2^15). Blocks of at most
    2^16 rows of C keep that true for any threshold.
    """
    p = np.uint64(PRIME)
    total = np.zeros((vandermonde.shape[0], coefficients.shape[1]), dtype=np.uint64)
    for start in range(0, coefficients.shape[0], _MATMUL_BLOCK):
        block = coefficients[start : start + _MATMUL_BLOCK]
        v = vandermonde[:, start : start + _MATMUL_BLOCK]
        high = (v @ (block >> np.uint64(16))) % p
        low = (v @ (block & np.uint64(0xFFFF))) % p
        total = (total + ((high << np.uint64(16)) % p) + low) % p
    return total


# Rows of C per product: keeps every row sum of V L and V H below 2^64 (see ``_evaluate``).
_MATMUL_BLOCK = 1 << 16


@lru_cache(maxsize=64)
def _vandermonde(xs: tuple[int, ...], columns: int) -> np.ndarray:
    """V[i, j] = x_i^j mod p for j < ``columns``, uint64, read-only (share groups of one
    session all use the points 1 .. |G|, so one matrix serves every client)."""
    powers = np.ones((len(xs), columns), dtype=np.uint64)
    x_column = np.asarray(xs, dtype=np.uint64) % np.uint64(PRIME)
    for j in range(1, columns):
        powers[:, j] = powers[:, j - 1] * x_column % np.uint64(PRIME)
    powers.setflags(write=False)
    return powers


def combine(shares: Sequence[Share]) -> bytes:
    """The secret from shares by Lagrange interpolation at 0 over GF(p).

    With at least t consistent shares this is the secret; with fewer it is a different
    value (or ``ValueError`` when a limb falls outside 16 bits), never an error message
    that reveals anything.
    """
    if not shares:
        raise ValueError("no shares")
    xs = tuple(share.x for share in shares)
    _check_points(xs)
    weights = np.asarray(_lagrange_at_zero(xs), dtype=np.uint64)
    values = np.stack([share.values() for share in shares])
    # Each product is < 2^62 and reduced before summing t of them (< 2^31 * t fits in 64 bits).
    terms = (values * weights[:, None]) % np.uint64(PRIME)
    limbs = terms.sum(axis=0, dtype=np.uint64) % np.uint64(PRIME)
    return limbs_to_secret(limbs)


@lru_cache(maxsize=256)
def _lagrange_at_zero(xs: tuple[int, ...]) -> tuple[int, ...]:
    """lambda_i = prod_(j != i) x_j / (x_j - x_i) mod p (the same point sets recur across owners)."""
    weights = []
    for i, xi in enumerate(xs):
        numerator, denominator = 1, 1
        for j, xj in enumerate(xs):
            if j != i:
                numerator = numerator * xj % PRIME
                denominator = denominator * (xj - xi) % PRIME
        weights.append(numerator * pow(denominator, -1, PRIME) % PRIME)
    return tuple(weights)


def _check_points(points: Sequence[int]) -> list[int]:
    xs = [int(x) for x in points]
    if len(set(xs)) != len(xs):
        raise InvalidInputError("points", "evaluation points must be distinct")
    if any(not 1 <= x < PRIME for x in xs):
        raise InvalidInputError("points", f"evaluation points must lie in [1, {PRIME})")
    return xs
