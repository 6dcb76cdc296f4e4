"""Fixed-point encoding, the overflow-safe modulus and the parameter rule."""

from __future__ import annotations

import math

import numpy as np
import pytest

from accounting.errors import InvalidInputError
from trainer.secagg import SecAggParams, choose_params, decode_sum, encode, required_modulus_bits
from trainer.secagg.encoding import max_abs_encoded, to_residues, word_dtype


def test_required_bits_matches_the_formula_with_a_safety_bit() -> None:
    for n, bound, scale in [(1, 1.0, 1.0), (10, 1.0, 2**16), (50, 3.5, 1000.0), (200, 10.0, 2**19)]:
        formula = math.ceil(math.log2(2 * n * (bound * scale + 1))) + 1
        bits = required_modulus_bits(n, bound, scale)
        assert formula <= bits <= formula + 1
        # The signed range of b bits holds the largest possible |sum|.
        assert 2 ** (bits - 1) > n * max_abs_encoded(bound, scale)


@pytest.mark.parametrize("num_clients, scale", [(7, 3.7), (50, 2.0**20), (200, 123.456)])
def test_the_chosen_width_never_overflows_at_the_bound(num_clients: int, scale: float) -> None:
    bound = 2.5
    params = choose_params(num_clients, 1, bound, scale=scale)
    limit = max_abs_encoded(bound, scale)
    for sign in (1, -1):
        words = to_residues(np.full(num_clients, sign * limit, dtype=np.int64), params.modulus_bits)
        total = words.sum(dtype=word_dtype(params.modulus_bits)).reshape(1)
        assert decode_sum(total, scale=1.0, modulus_bits=params.modulus_bits)[0] == sign * num_clients * limit
    # One bit fewer than the formula's width wraps: the sum decodes with the wrong sign.
    narrow = required_modulus_bits(num_clients, bound, scale) - 2
    words = to_residues(np.full(num_clients, limit, dtype=np.int64), narrow)
    total = words.astype(np.uint64).sum().reshape(1) & np.uint64((1 << narrow) - 1)
    assert decode_sum(total, scale=1.0, modulus_bits=narrow)[0] != num_clients * limit


def test_extreme_inputs_sum_exactly_through_encode() -> None:
    bound, scale, n = 1.0, 3.7, 9
    params = choose_params(n, 1, bound, scale=scale)
    rng = np.random.default_rng(0)
    total = np.zeros(1000, dtype=word_dtype(params.modulus_bits))
    for _ in range(n):
        total += encode(np.full(1000, bound), scale=scale, modulus_bits=params.modulus_bits, value_bound=bound, rng=rng)
    decoded = decode_sum(total, scale=scale, modulus_bits=params.modulus_bits)
    assert np.all(decoded > 0) and np.all(np.abs(decoded - n * bound) <= n / scale)


def test_a_value_beyond_the_bound_is_refused() -> None:
    params = choose_params(10, 5, 1.0)
    rng = np.random.default_rng(0)
    with pytest.raises(InvalidInputError, match="value_bound"):
        encode(np.array([0.5, 1.0001]), scale=params.scale, modulus_bits=params.modulus_bits, value_bound=1.0, rng=rng)
    for bad in (np.nan, np.inf):
        with pytest.raises(InvalidInputError, match="NaN or infinite"):
            encode(np.array([bad]), scale=params.scale, modulus_bits=params.modulus_bits, value_bound=1.0, rng=rng)


def test_more_than_64_bits_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="64-bit maximum") as info:
        choose_params(10_000, 10, 1.0, scale=2.0**50)
    assert info.value.field == "modulus_bits"
    with pytest.raises(InvalidInputError, match="modulus_bits"):
        SecAggParams(num_clients=10, threshold=5, value_bound=1.0, scale=16.0, modulus_bits=65)


def test_a_modulus_narrower_than_needed_is_refused() -> None:
    needed = required_modulus_bits(10, 1.0, 2.0**16)
    with pytest.raises(InvalidInputError, match="can overflow"):
        SecAggParams(num_clients=10, threshold=5, value_bound=1.0, scale=2.0**16, modulus_bits=needed - 1)
    SecAggParams(num_clients=10, threshold=5, value_bound=1.0, scale=2.0**16, modulus_bits=needed)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"num_clients": 0, "threshold": 1, "value_bound": 1.0}, "num_clients"),
        ({"num_clients": 5, "threshold": 0, "value_bound": 1.0}, "threshold"),
        ({"num_clients": 5, "threshold": 6, "value_bound": 1.0}, "threshold"),
        ({"num_clients": 5, "threshold": 2, "value_bound": -1.0}, "value_bound"),
        ({"num_clients": 5, "threshold": 2, "value_bound": 1.0, "scale": 0.0}, "scale"),
        ({"num_clients": 5, "threshold": 2, "value_bound": 1.0, "mode": "dense"}, "mode"),
        ({"num_clients": 5, "threshold": 2, "value_bound": 1.0, "mode": "sparse", "neighbours": 1}, "neighbours"),
    ],
)
def test_bad_parameters_name_their_field(kwargs: dict, field: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        choose_params(**kwargs)
    assert info.value.field == field


def test_default_scale_prefers_32_bit_words() -> None:
    params = choose_params(50, 25, 2.0)
    assert params.modulus_bits <= 32 and params.value_bound * params.scale >= 2**12
    assert word_dtype(params.modulus_bits) == np.uint32
    # So many clients that 32 bits leave too few steps: 64-bit words instead.
    wide = choose_params(10**7, 10, 100.0)
    assert 32 < wide.modulus_bits <= 64 and word_dtype(wide.modulus_bits) == np.uint64


def test_randomised_rounding_is_unbiased() -> None:
    scale, count = 8.0, 400_000
    value = 0.3 / scale + 1.0  # frac(x * scale) = 0.3: deterministic rounding would be off by 0.3 steps
    rng = np.random.default_rng(1)
    words = encode(np.full(count, value), scale=scale, modulus_bits=16, value_bound=2.0, rng=rng)
    decoded = decode_sum(words, scale=scale, modulus_bits=16)
    assert set(np.unique(decoded)) == {math.floor(value * scale) / scale, math.ceil(value * scale) / scale}
    standard_error = math.sqrt(0.3 * 0.7) / scale / math.sqrt(count)
    assert abs(decoded.mean() - value) < 5 * standard_error
    assert abs(np.mean(decoded > value) - 0.3) < 0.01


def test_negative_values_round_trip() -> None:
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, 10_000)
    words = encode(x, scale=2.0**20, modulus_bits=40, value_bound=1.0, rng=rng)
    assert words.dtype == np.uint64 and int(words.max()) < 2**40
    assert np.max(np.abs(decode_sum(words, scale=2.0**20, modulus_bits=40) - x)) <= 2.0**-20
