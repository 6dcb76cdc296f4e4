"""secure_sum: correctness against the plain sum, dropouts, aborts, reproducibility, SecAgg+."""

from __future__ import annotations

import numpy as np
import pytest

from accounting.errors import InvalidInputError
from trainer.secagg import SecAggResult, choose_params, plain_sum, secure_sum
from trainer.secagg.graph import is_connected, neighbour_sets


def _vectors(num_clients: int, dimension: int, bound: float, seed: int, first_id: int = 0) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {first_id + 7 * u: rng.uniform(-bound, bound, dimension) for u in range(num_clients)}


def _check_sum(result: SecAggResult, vectors: dict[int, np.ndarray], params, seed: int) -> None:
    assert not result.aborted and result.reason is None and result.sum is not None
    included = {u: vectors[u] for u in result.survivors}
    assert sorted(result.survivors + result.dropped) == sorted(vectors)
    # Bit-exact against the unmasked reference with the same rounding...
    np.testing.assert_array_equal(result.sum, plain_sum(included, params, seed=seed))
    # ...and within quantisation of the float sum: each client rounds by less than one step.
    exact = np.sum(list(included.values()), axis=0)
    assert np.max(np.abs(result.sum - exact)) <= len(included) / params.scale


@pytest.mark.parametrize("mode", ["full", "sparse"])
@pytest.mark.parametrize(
    "num_clients, threshold, dimension, bound",
    [(1, 1, 3, 1.0), (2, 1, 17, 0.5), (3, 3, 100, 2.0), (8, 4, 1000, 1.0), (25, 13, 513, 10.0)],
)
def test_unmasked_sum_equals_plain_sum(mode: str, num_clients: int, threshold: int, dimension: int, bound: float) -> None:
    params = choose_params(num_clients, threshold, bound, mode=mode)
    vectors = _vectors(num_clients, dimension, bound, seed=num_clients + dimension, first_id=3)
    result = secure_sum(vectors, params, seed=11)
    _check_sum(result, vectors, params, seed=11)
    assert result.dropped == []


def test_negative_sums_and_64_bit_words() -> None:
    params = choose_params(6, 3, 1.0, scale=2.0**40)
    assert params.modulus_bits > 32
    vectors = {u: -np.abs(v) for u, v in _vectors(6, 200, 1.0, seed=1).items()}
    result = secure_sum(vectors, params, seed=2)
    _check_sum(result, vectors, params, seed=2)
    assert np.all(result.sum < 0)


def test_fewer_clients_than_the_modulus_was_sized_for() -> None:
    params = choose_params(40, 3, 1.0)
    vectors = _vectors(5, 50, 1.0, seed=4)
    _check_sum(secure_sum(vectors, params, seed=0), vectors, params, seed=0)


@pytest.mark.parametrize("mode", ["full", "sparse"])
def test_dropouts_before_masking_and_before_unmasking_are_recovered(mode: str) -> None:
    params = choose_params(20, 8, 1.0, mode=mode, dropout_fraction=0.35 if mode == "sparse" else 0.0)
    vectors = _vectors(20, 300, 1.0, seed=9)
    ids = sorted(vectors)
    before_masking, before_unmasking = ids[1:5], ids[10:13]
    result = secure_sum(
        vectors, params, seed=5, drop_before_masking=before_masking, drop_before_unmasking=before_unmasking
    )
    _check_sum(result, vectors, params, seed=5)
    assert result.dropped == before_masking
    assert set(before_unmasking) <= set(result.survivors)  # their inputs are in the sum


@pytest.mark.parametrize("mode", ["full", "sparse"])
def test_fewer_than_threshold_survivors_abort_with_nothing_released(mode: str) -> None:
    params = choose_params(12, 6, 1.0, mode=mode)
    vectors = _vectors(12, 40, 1.0, seed=3)
    ids = sorted(vectors)
    result = secure_sum(vectors, params, seed=1, drop_before_masking=ids[:7])
    assert result.aborted and result.sum is None and "fewer than the threshold" in (result.reason or "")
    assert result.survivors == [] and result.dropped == ids
    result = secure_sum(vectors, params, seed=1, drop_before_masking=ids[:6])
    if mode == "full":  # exactly t survivors is enough
        _check_sum(result, vectors, params, seed=1)
    else:  # SecAgg+ also needs t_k responders in each share group; here one group falls short
        assert result.sum is None and "needed to unmask" in (result.reason or "")


def test_too_few_unmasking_responders_abort() -> None:
    params = choose_params(10, 6, 1.0)
    vectors = _vectors(10, 40, 1.0, seed=3)
    ids = sorted(vectors)
    result = secure_sum(vectors, params, seed=1, drop_before_masking=ids[:2], drop_before_unmasking=ids[2:5])
    assert result.aborted and result.sum is None
    assert result.survivors == ids[2:]  # their masked inputs arrived but nothing was unmasked


def test_reproducible_from_seed() -> None:
    params = choose_params(6, 3, 1.0)
    vectors = _vectors(6, 100, 1.0, seed=0)
    first = secure_sum(vectors, params, seed=42, drop_before_masking=[7])
    again = secure_sum(vectors, params, seed=42, drop_before_masking=[7])
    np.testing.assert_array_equal(first.sum, again.sum)
    other = secure_sum(vectors, params, seed=43, drop_before_masking=[7])
    assert not np.array_equal(first.sum, other.sum)  # different rounding draws
    assert np.max(np.abs(first.sum - other.sum)) <= 2 * 5 / params.scale


def test_bad_calls_are_refused() -> None:
    params = choose_params(3, 2, 1.0)
    good = _vectors(3, 5, 1.0, seed=0)
    with pytest.raises(InvalidInputError, match="exceed num_clients"):
        secure_sum(_vectors(4, 5, 1.0, seed=0), params, seed=0)
    with pytest.raises(InvalidInputError, match="same length"):
        secure_sum({0: np.zeros(3), 1: np.zeros(4)}, params, seed=0)
    with pytest.raises(InvalidInputError, match="value_bound") as info:
        secure_sum({0: np.zeros(3), 1: np.full(3, 1.5)}, params, seed=0)
    assert info.value.field == "vectors[1]"
    with pytest.raises(InvalidInputError, match="not participants"):
        secure_sum(good, params, seed=0, drop_before_masking=[99])
    with pytest.raises(InvalidInputError, match="twice"):
        secure_sum(good, params, seed=0, drop_before_masking=[0], drop_before_unmasking=[0])
    with pytest.raises(InvalidInputError, match="seed"):
        secure_sum(good, params, seed=-1)


def test_sparse_graph_is_regular_symmetric_and_seeded() -> None:
    ids = list(range(0, 300, 3))
    k = choose_params(len(ids), 50, 1.0, mode="sparse").neighbours
    assert k is not None
    assert k % 2 == 0 and k < len(ids) - 1
    graph = neighbour_sets(ids, k, order_seed=1)
    assert all(len(graph[u]) == k and u not in graph[u] for u in ids)
    assert all(u in graph[v] for u in ids for v in graph[u])
    assert is_connected(ids, graph)
    assert graph == neighbour_sets(ids, k, order_seed=1) and graph != neighbour_sets(ids, k, order_seed=2)
    assert neighbour_sets(ids, len(ids), order_seed=1) == neighbour_sets(ids, None, order_seed=1)


def test_sparse_mode_masks_only_with_neighbours() -> None:
    params = choose_params(40, 20, 1.0, mode="sparse", dropout_fraction=0.125)
    # Bell et al.'s (k, t) for a third corrupt and no dropouts (planner.harary).
    assert params.neighbours is not None and params.neighbours < 39 and params.share_threshold is not None
    vectors = _vectors(40, 64, 1.0, seed=8)
    result = secure_sum(vectors, params, seed=8, drop_before_masking=sorted(vectors)[:5])
    _check_sum(result, vectors, params, seed=8)


def test_sparse_mode_aborts_when_the_survivors_are_disconnected() -> None:
    # A ring (k = 2) of 10 clients: dropping two opposite clients splits the survivors in two.
    params = choose_params(10, 2, 1.0, mode="sparse", neighbours=2)
    vectors = _vectors(10, 16, 1.0, seed=1)
    from trainer.secagg.protocol import new_session

    graph = new_session(sorted(vectors), params, seed=3).graph
    start = sorted(vectors)[0]
    ring = [start]
    while len(ring) < 10:
        ring.append(next(v for v in graph[ring[-1]] if v not in ring))
    result = secure_sum(vectors, params, seed=3, drop_before_masking=[ring[0], ring[5]])
    assert result.aborted and result.sum is None and "disconnected" in (result.reason or "")


@pytest.mark.parametrize("modulus_bits", [20, 31, 32, 33, 63, 64])
def test_every_word_width_masks_and_unmasks(modulus_bits: int) -> None:
    from trainer.secagg import SecAggParams

    params = SecAggParams(num_clients=5, threshold=3, value_bound=1.0, scale=2.0**10, modulus_bits=modulus_bits)
    vectors = _vectors(5, 257, 1.0, seed=modulus_bits)
    result = secure_sum(vectors, params, seed=1, drop_before_masking=[0], drop_before_unmasking=[7])
    _check_sum(result, vectors, params, seed=1)


def test_the_module_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = "import sys, trainer.secagg, bench.secagg; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_messages_pickle_as_their_fields_only() -> None:
    """The worker pipes pickle messages (``trainer.secagg.parallel``): a pickled roster entry
    carries the raw keys, not the parsed-key memo, and every message survives the trip."""
    import pickle

    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    from trainer.secagg import shamir
    from trainer.secagg.keys import public_key_bytes
    from trainer.secagg.messages import AdvertisedKeys, EncryptedShare

    advertised = AdvertisedKeys(3, public_key_bytes(X25519PrivateKey.generate()), public_key_bytes(X25519PrivateKey.generate()))
    parsed = advertised.public_key("mask")
    assert advertised.public_key("mask") is parsed  # parsed once
    copy = pickle.loads(pickle.dumps(advertised))
    assert copy == advertised and copy._parsed == {}
    assert copy.public_key("cipher").public_bytes_raw() == advertised.cipher_public_key
    for message in (EncryptedShare(1, 2, b"sealed"), shamir.Share(5, b"\x01\x02\x03\x04")):
        assert pickle.loads(pickle.dumps(message)) == message
