"""Sessions over integers the clients already reduced mod 2^b (``encoding="residues"``), the
discrete mechanism's input (docs/secure-aggregation.md §Discrete noise, "The trainer side")."""

from __future__ import annotations

import numpy as np
import pytest

from accounting.errors import InvalidInputError
from trainer.secagg import exact_sum, plain_sum, secure_sum
from trainer.secagg.encoding import word_dtype
from trainer.secagg.params import SecAggParams, residue_params


@pytest.mark.parametrize("bits", [13, 32, 40])
@pytest.mark.parametrize("mode", ["full", "sparse"])
def test_the_session_releases_the_survivors_residue_sum_undecoded(bits, mode):
    rng = np.random.default_rng(bits)
    ids = list(range(3, 15))
    vectors = {u: rng.integers(0, 2**bits, size=37, dtype=np.uint64).astype(word_dtype(bits)) for u in ids}
    params = residue_params(len(ids), 6, bits, mode=mode, neighbours=6 if mode == "sparse" else None)
    early, late = [4, 9], [7]
    result = secure_sum(vectors, params, seed=1, drop_before_masking=early, drop_before_unmasking=late)
    survivors = [u for u in ids if u not in early]
    assert not result.aborted and result.survivors == survivors and result.sum is not None
    expected = sum(vectors[u].astype(object) for u in survivors) % 2**bits  # exact integers
    assert result.sum.dtype == word_dtype(bits) and list(result.sum.astype(object)) == list(expected)
    assert np.array_equal(result.sum, plain_sum({u: vectors[u] for u in survivors}, params, seed=1))
    simulated = exact_sum(vectors, params, seed=1, drop_before_masking=early, drop_before_unmasking=late)
    assert simulated.sum is not None and simulated.survivors == result.survivors
    assert np.array_equal(simulated.sum, result.sum)
    forked = secure_sum(vectors, params, seed=1, drop_before_masking=early, drop_before_unmasking=late, workers=2)
    assert forked.sum is not None and np.array_equal(forked.sum, result.sum)


def test_a_residue_out_of_range_or_not_an_integer_is_refused_naming_the_client():
    params = residue_params(3, 2, 10)
    good = np.zeros(5, dtype=np.uint32)
    cases: list[tuple[np.ndarray, str]] = [
        (np.full(5, 1024, dtype=np.uint32), "outside"), (np.full(5, -1, dtype=np.int64), "outside"), (np.zeros(5), "integers"),
    ]
    for bad, words in cases:
        for run in (secure_sum, exact_sum):
            with pytest.raises(InvalidInputError) as error:
                run({0: good, 1: bad, 2: good}, params, seed=0)
            assert error.value.field == "vectors[1]" and words in error.value.reason
    with pytest.raises(InvalidInputError) as error:
        residue_params(3, 2, 65)
    assert error.value.field == "modulus_bits"
    with pytest.raises(InvalidInputError) as error:
        SecAggParams(3, 2, 1.0, 1.0, 30, encoding="decimal")  # type: ignore[arg-type]
    assert error.value.field == "encoding"
