"""Fixed-point encoding of float vectors into Z_(2^b) and decoding of their sum.

``docs/secure-aggregation.md``, "Fixed-point encoding" and "Overflow bound", derives
everything here. In short: a coordinate x with |x| <= B becomes the integer
v = floor(x * scale) + Bernoulli(frac(x * scale)) (unbiased: E[v] = x * scale), with
|v| <= floor(B * scale) + 1, stored as v mod 2^b (two's complement). A sum of n such
integers has absolute value at most M = n * (floor(B * scale) + 1); it decodes without
wraparound when 2^(b-1) > M, and we take b = bitlen(2 M) + 1 (one safety bit beyond
ceil(log2(2 n (B scale + 1))), which bitlen(2 M) already reaches).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from accounting.errors import InvalidInputError

MAX_MODULUS_BITS = 64
# x * scale must be an exactly representable float64 integer range for floor() to be exact.
MAX_SCALED_BOUND = 2.0**52


def word_dtype(modulus_bits: int) -> np.dtype:
    """The unsigned word that holds residues mod 2^modulus_bits: uint32 up to 32 bits, else uint64."""
    return np.dtype(np.uint32) if modulus_bits <= 32 else np.dtype(np.uint64)


def modulus_mask(modulus_bits: int) -> int:
    """2^b - 1: reducing a word mod 2^b is a bitwise AND with it (unsigned wraparound does the rest)."""
    return (1 << modulus_bits) - 1


def max_abs_encoded(value_bound: float, scale: float) -> int:
    """Largest |v| that ``encode`` can produce for |x| <= value_bound: floor(B * scale) + 1."""
    return int(math.floor(value_bound * scale)) + 1


def required_modulus_bits(num_clients: int, value_bound: float, scale: float) -> int:
    """Smallest b (with one safety bit) so that a sum of ``num_clients`` encodings never wraps.

    M = n * (floor(B * scale) + 1) bounds |sum|; b = bitlen(2 M) + 1 >= ceil(log2(2 n (B scale + 1))) + 1.
    (``docs/secure-aggregation.md``, "Overflow bound".)
    """
    _check_positive_int(num_clients, "num_clients")
    _check_positive_finite(value_bound, "value_bound")
    _check_positive_finite(scale, "scale")
    max_abs_sum = num_clients * max_abs_encoded(value_bound, scale)
    return (2 * max_abs_sum).bit_length() + 1


def check_modulus(num_clients: int, value_bound: float, scale: float, modulus_bits: int) -> None:
    """Refuse a modulus that could overflow for this bound, or that is wider than 64 bits."""
    if value_bound * scale > MAX_SCALED_BOUND:
        raise InvalidInputError(
            "scale",
            f"value_bound * scale = {value_bound * scale:.3g} exceeds 2^52; float64 cannot "
            "round it exactly. Use a smaller scale.",
        )
    needed = required_modulus_bits(num_clients, value_bound, scale)
    if needed > MAX_MODULUS_BITS:
        raise InvalidInputError(
            "modulus_bits",
            f"{num_clients} clients with |x| <= {value_bound:g} at scale {scale:g} need "
            f"{needed} bits, more than the {MAX_MODULUS_BITS}-bit maximum; lower the scale "
            "or the value bound.",
        )
    if not isinstance(modulus_bits, int) or isinstance(modulus_bits, bool):
        raise InvalidInputError("modulus_bits", f"must be an integer, got {modulus_bits!r}")
    if modulus_bits > MAX_MODULUS_BITS:
        raise InvalidInputError(
            "modulus_bits", f"{modulus_bits} exceeds the {MAX_MODULUS_BITS}-bit maximum"
        )
    if modulus_bits < needed:
        raise InvalidInputError(
            "modulus_bits",
            f"{modulus_bits} bits can overflow: {num_clients} clients with |x| <= "
            f"{value_bound:g} at scale {scale:g} need at least {needed}",
        )


def encode(
    x: np.ndarray,
    *,
    scale: float,
    modulus_bits: int,
    value_bound: float,
    rng: np.random.Generator | Callable[[], np.random.Generator],
    field: str = "x",
) -> np.ndarray:
    """Randomised-rounding fixed point: x -> (floor(x s) + Bernoulli(frac(x s))) mod 2^b.

    ``to_residues(encode_integers(...))``. Returns words of ``word_dtype(modulus_bits)``
    in [0, 2^b). (``docs/secure-aggregation.md``, "Fixed-point encoding".)
    """
    integers = encode_integers(x, scale=scale, value_bound=value_bound, rng=rng, field=field)
    return to_residues(integers.astype(np.int64), modulus_bits)


def encode_integers(
    x: np.ndarray,
    *,
    scale: float,
    value_bound: float,
    rng: np.random.Generator | Callable[[], np.random.Generator],
    field: str = "x",
) -> np.ndarray:
    """The signed integers v = floor(x s) + Bernoulli(frac(x s)) before reduction mod 2^b.

    Returned as float64 holding integers, exact since |v| <= B s + 1 <= 2^52 + 1
    (``check_modulus`` caps B s at 2^52).
    Refuses (``InvalidInputError`` naming ``field``) a non-finite coordinate or one with
    |x| > value_bound: the caller clips and bounds first, this function checks. Then
    |v| <= floor(B s) + 1 (``max_abs_encoded``): float multiplication is monotone, so
    |x s| <= B s as computed. Draws nothing from ``rng`` when every x s is already an
    integer (nothing to round); ``rng`` may be a function that makes the generator, called
    only then.
    """
    values = np.asarray(x, dtype=np.float64)
    if values.ndim != 1:
        raise InvalidInputError(field, f"must be a 1-D vector, got shape {values.shape}")
    largest = max(float(values.max()), -float(values.min())) if values.size else 0.0
    if not largest <= value_bound:  # also true for NaN (max and min propagate it) and infinity
        if not np.all(np.isfinite(values)):
            raise InvalidInputError(field, "contains NaN or infinite values")
        raise InvalidInputError(
            field,
            f"a coordinate has |x| = {largest:.6g} beyond the declared value_bound "
            f"{value_bound:.6g}; clip and bound the vector before secure aggregation",
        )
    scaled = values * scale
    rounded = np.floor(scaled)
    # On the grid already (as the round engine's vectors are), every draw would leave x s
    # unchanged, so none is made.
    if np.not_equal(scaled, rounded).any():
        # P(round up) = frac, so E[v] = floor + frac = x * scale exactly.
        generator = rng if isinstance(rng, np.random.Generator) else rng()
        rounded += generator.random(values.shape[0]) < np.subtract(scaled, rounded, out=scaled)
    return rounded


def to_residues(integers: np.ndarray, modulus_bits: int) -> np.ndarray:
    """Signed int64 -> residues mod 2^b (two's complement, then keep the low b bits).

    Integer casts to an unsigned type keep the low bits (C conversion rules), so 32-bit
    words are one cast; narrower moduli then keep the low b bits.
    """
    words = np.asarray(integers, dtype=np.int64).astype(word_dtype(modulus_bits))
    if modulus_bits not in (32, 64):
        words &= words.dtype.type(modulus_mask(modulus_bits))
    return words


def check_residues(x: np.ndarray, modulus_bits: int, *, field: str = "x") -> np.ndarray:
    """A client's input already reduced mod 2^b, as words of ``word_dtype(modulus_bits)``.

    Refuses (``InvalidInputError`` naming ``field``) anything but a non-empty 1-D array of
    unsigned or non-negative integers below 2^b: a residue out of range would be a value the
    session's modulus cannot hold, silently wrapped.
    """
    values = np.asarray(x)
    if values.ndim != 1:
        raise InvalidInputError(field, f"must be a 1-D vector, got shape {values.shape}")
    if values.dtype.kind not in "ui":
        raise InvalidInputError(field, f"residues mod 2^{modulus_bits} must be integers, got {values.dtype}")
    if values.size and (int(values.min()) < 0 or int(values.max()) > modulus_mask(modulus_bits)):
        raise InvalidInputError(field, f"a residue lies outside [0, 2^{modulus_bits})")
    return values.astype(word_dtype(modulus_bits))


def decode_sum(words: np.ndarray, *, scale: float, modulus_bits: int) -> np.ndarray:
    """Residues mod 2^b of a sum -> float64: r >= 2^(b-1) means r - 2^b, then divide by scale.

    Exact when the true integer sum lies in [-2^(b-1), 2^(b-1)), which ``check_modulus``
    guarantees. (``docs/secure-aggregation.md``, "Fixed-point encoding".)
    """
    residues = np.asarray(words).astype(np.uint64) & np.uint64(modulus_mask(modulus_bits))
    # Sign extension: move bit b-1 to bit 63, reinterpret as int64, shift back arithmetically.
    shift = 64 - modulus_bits
    signed = (residues << np.uint64(shift)).view(np.int64) >> np.int64(shift)
    return signed.astype(np.float64) / scale


def _check_positive_int(value: int, field: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidInputError(field, f"must be a positive integer, got {value!r}")


def _check_positive_finite(value: float, field: str) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise InvalidInputError(field, f"must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise InvalidInputError(field, f"must be positive and finite, got {value!r}")
