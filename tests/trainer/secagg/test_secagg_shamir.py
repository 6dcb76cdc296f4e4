"""Shamir sharing over GF(2^31 - 1), checked against PyCryptodome's GF(2^128) scheme."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
from Crypto.Protocol.SecretSharing import Shamir as PyCryptodomeShamir

from trainer.secagg import shamir


def _try_combine(shares: list[shamir.Share]) -> bytes | None:
    try:
        return shamir.combine(shares)
    except ValueError:
        return None


@pytest.mark.parametrize("threshold, count", [(1, 1), (1, 4), (2, 3), (3, 5), (5, 5), (10, 30)])
def test_any_t_shares_reconstruct_and_t_minus_1_do_not(threshold: int, count: int) -> None:
    secret = os.urandom(64)
    shares = shamir.split(secret, threshold, range(1, count + 1), os.urandom(32))
    rng = np.random.default_rng(threshold * 100 + count)
    subsets = [rng.choice(count, size=threshold, replace=False) for _ in range(20)]
    for subset in subsets:
        assert shamir.combine([shares[i] for i in subset]) == secret
    assert shamir.combine(shares) == secret  # more than t also works
    if threshold > 1:
        for subset in subsets:
            assert _try_combine([shares[i] for i in subset[: threshold - 1]]) != secret


def test_every_subset_of_a_small_scheme() -> None:
    secret = os.urandom(32)
    shares = shamir.split(secret, 3, [5, 9, 17, 40, 1000], os.urandom(32))
    for size in range(1, 6):
        for subset in itertools.combinations(shares, size):
            assert (_try_combine(list(subset)) == secret) == (size >= 3)


def test_agrees_with_pycryptodome_on_what_reconstructs() -> None:
    """Both schemes, same 16-byte secrets and (t, n): identical reconstruct / fail pattern."""
    threshold, count = 4, 7
    rng = np.random.default_rng(5)
    for _ in range(5):
        secret = os.urandom(16)
        ours = shamir.split(secret, threshold, range(1, count + 1), os.urandom(32))
        theirs = PyCryptodomeShamir.split(threshold, count, secret)
        for size in (threshold - 1, threshold, count):
            picked = rng.choice(count, size=size, replace=False)
            ours_ok = _try_combine([ours[i] for i in picked]) == secret
            theirs_ok = PyCryptodomeShamir.combine([theirs[i] for i in picked]) == secret
            assert ours_ok == theirs_ok == (size >= threshold)


def test_split_is_reproducible_from_its_randomness_and_hides_with_fresh_randomness() -> None:
    secret = bytes(range(32))
    first = shamir.split(secret, 3, range(1, 6), b"r" * 32)
    assert first == shamir.split(secret, 3, range(1, 6), b"r" * 32)
    other = shamir.split(secret, 3, range(1, 6), b"s" * 32)
    assert all(a.data != b.data for a, b in zip(first, other))
    # A single share of a t >= 2 scheme does not contain the secret's limbs.
    assert all(secret[:2] not in share.data[:4] for share in first)


def test_bad_inputs() -> None:
    with pytest.raises(ValueError):
        shamir.split(b"odd", 1, [1], os.urandom(32))
    with pytest.raises(ValueError):
        shamir.split(b"ab", 3, [1, 2], os.urandom(32))
    with pytest.raises(ValueError):
        shamir.split(b"ab", 1, [1, 1], os.urandom(32))
    with pytest.raises(ValueError):
        shamir.split(b"ab", 1, [0], os.urandom(32))


def test_shares_are_the_polynomials_values_in_exact_integer_arithmetic() -> None:
    """split evaluates f_l(x) = sum_j a_(j,l) x^j mod p by a split-limb matrix product
    (``_evaluate``); here each value is recomputed with Python integers from the same
    coefficients (the ChaCha20 stream under the share randomness)."""
    from trainer.secagg.prg import uniform_below

    secret, randomness = os.urandom(64), os.urandom(32)
    threshold, points = 5, [1, 2, 3, 17, 33, 2**31 - 2]
    limbs = [int(v) for v in np.frombuffer(secret, dtype="<u2")]
    coefficients = uniform_below(randomness, (threshold - 1) * len(limbs), shamir.PRIME).reshape(threshold - 1, -1)
    for share in shamir.split(secret, threshold, points, randomness):
        for limb, value in enumerate(share.values()):
            terms = [limbs[limb]] + [int(coefficients[j, limb]) for j in range(threshold - 1)]
            assert int(value) == sum(a * pow(share.x, j, shamir.PRIME) for j, a in enumerate(terms)) % shamir.PRIME


def test_the_matrix_product_is_exact_at_the_largest_values_over_several_blocks() -> None:
    """Every operand p - 1 (the largest products) and more rows than one block of
    ``_evaluate`` (sums that would wrap 64 bits without the split and the blocks)."""
    rows = shamir._MATMUL_BLOCK + 5
    p = shamir.PRIME
    vandermonde = np.full((2, rows), p - 1, dtype=np.uint64)
    coefficients = np.full((rows, 3), p - 1, dtype=np.uint64)
    coefficients[7, 1] = 12345
    result = shamir._evaluate(vandermonde, coefficients)
    assert result.dtype == np.uint64
    expected_plain = rows * (p - 1) * (p - 1) % p
    expected_one = ((rows - 1) * (p - 1) * (p - 1) + (p - 1) * 12345) % p
    assert result[:, 0].tolist() == [expected_plain] * 2
    assert result[:, 1].tolist() == [expected_one] * 2
