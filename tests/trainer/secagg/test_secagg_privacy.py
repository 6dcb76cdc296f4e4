"""What the server sees: uniform masked words, ciphertexts, one kind of share per client."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from trainer.secagg import choose_params, encode
from trainer.secagg.client import Client
from trainer.secagg.errors import ProtocolError
from trainer.secagg.keys import rounding_rng
from trainer.secagg.messages import AdvertisedKeys, EncryptedShare, MaskedInput, UnmaskingShares
from trainer.secagg.protocol import run_session
from trainer.secagg.server import Server
from trainer.secagg.shamir import Share

DIMENSION = 1 << 15
P_VALUE_FLOOR = 1e-4  # fixed seeds make these tests deterministic; a leak gives p ~ 0


def _top_byte_p_value(words: np.ndarray, bits: int) -> float:
    top = (words.astype(np.uint64) >> np.uint64(bits - 8)).astype(np.int64)
    counts = np.bincount(top, minlength=256)
    return float(stats.chisquare(counts).pvalue)


def _bit_frequencies(words: np.ndarray, bits: int) -> np.ndarray:
    values = words.astype(np.uint64)
    return np.array([np.mean((values >> np.uint64(i)) & np.uint64(1)) for i in range(bits)])


def _masked_vector_of(inputs: dict[int, np.ndarray], params, client: int, seed: int) -> np.ndarray:
    _, server = run_session(inputs, params, seed=seed)
    return next(m.masked for m in server.received if isinstance(m, MaskedInput) and m.sender == client)


def test_a_masked_vector_is_uniform_where_its_plaintext_is_not() -> None:
    params = choose_params(5, 3, 1.0)
    bits = params.modulus_bits
    rng = np.random.default_rng(0)
    inputs = {u: rng.uniform(-0.1, 0.1, DIMENSION) for u in range(5)}
    plaintext = encode(
        inputs[2], scale=params.scale, modulus_bits=bits, value_bound=1.0, rng=rounding_rng(0, 2)
    )
    masked = _masked_vector_of(inputs, params, client=2, seed=0)
    assert _top_byte_p_value(plaintext, bits) < 1e-100
    assert _top_byte_p_value(masked, bits) > P_VALUE_FLOOR
    tolerance = 5 * 0.5 / np.sqrt(DIMENSION)
    assert np.all(np.abs(_bit_frequencies(masked, bits) - 0.5) < tolerance)
    # Single-bit frequencies cannot see a symmetric plaintext; its two top bits (sign
    # extension) always agree, while the masked vector's agree half of the time.
    def top_bits_agree(words: np.ndarray) -> float:
        values = words.astype(np.uint64)
        return float(np.mean((values >> np.uint64(bits - 1)) == ((values >> np.uint64(bits - 2)) & np.uint64(1))))

    assert top_bits_agree(plaintext) == 1.0
    assert abs(top_bits_agree(masked) - 0.5) < tolerance


def test_masked_vectors_of_different_inputs_are_indistinguishable() -> None:
    params = choose_params(4, 2, 1.0)
    bits = params.modulus_bits
    zeros = {u: np.zeros(DIMENSION) for u in range(4)}
    extremes = {u: np.full(DIMENSION, 1.0 if u % 2 else -1.0) for u in range(4)}
    first = _masked_vector_of(zeros, params, client=1, seed=3)
    second = _masked_vector_of(extremes, params, client=1, seed=4)
    tops = [np.bincount((w.astype(np.uint64) >> np.uint64(bits - 8)).astype(np.int64), minlength=256) for w in (first, second)]
    assert stats.chi2_contingency(np.stack(tops)).pvalue > P_VALUE_FLOOR
    for words in (first, second):
        assert _top_byte_p_value(words, bits) > P_VALUE_FLOOR


def _walk(value: object, seen: set[int]) -> list[object]:
    """Every object reachable from ``value`` through attributes, containers and dataclass fields."""
    if id(value) in seen:
        return []
    seen.add(id(value))
    found = [value]
    if isinstance(value, dict):
        children = [*value.keys(), *value.values()]
    elif isinstance(value, (list, tuple, set, frozenset)):
        children = list(value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        children = [getattr(value, f.name) for f in dataclasses.fields(value)]
    elif hasattr(value, "__dict__") and not isinstance(value, type):
        children = list(vars(value).values())
    else:
        children = []
    for child in children:
        found.extend(_walk(child, seen))
    return found


def test_the_server_never_sees_a_client_or_a_plaintext() -> None:
    params = choose_params(6, 3, 1.0)
    rng = np.random.default_rng(1)
    inputs = {u: rng.uniform(-1, 1, 256) for u in range(6)}
    encoded = {
        u: encode(v, scale=params.scale, modulus_bits=params.modulus_bits, value_bound=1.0, rng=rounding_rng(9, u))
        for u, v in inputs.items()
    }
    result, server = run_session(inputs, params, seed=9, drop_before_masking=[0], drop_before_unmasking=[5])
    assert not result.aborted
    allowed = (AdvertisedKeys, EncryptedShare, MaskedInput, UnmaskingShares)
    assert {type(m) for m in server.received} == set(allowed)
    reachable = _walk(server, set())
    assert not any(isinstance(obj, Client) for obj in reachable)
    arrays = [obj for obj in reachable if isinstance(obj, np.ndarray)]
    assert arrays and all(a.dtype.kind == "u" for a in arrays)  # no float vector anywhere
    for array in arrays:
        for u, x in encoded.items():
            assert not (array.shape == x.shape and np.array_equal(array, x)), f"plaintext of {u} reached the server"
    for message in server.received:
        if isinstance(message, EncryptedShare):
            assert isinstance(message.ciphertext, bytes) and len(message.ciphertext) == 4 + 128 + 16
        if isinstance(message, UnmaskingShares):
            assert not set(message.self_mask_shares) & set(message.mask_key_shares)
    # The server is built from the parameters and the public setup alone.
    assert list(inspect.signature(Server.__init__).parameters) == ["self", "params", "setup"]
    source = Path(inspect.getsourcefile(Server) or "").read_text()
    imported = {
        node.module for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert "trainer.secagg.client" not in imported and "trainer.secagg.protocol" not in imported


def test_each_client_reveals_one_kind_of_share_per_owner(drive) -> None:
    session = drive(8, 4, 32, drop_before_masking=(0, 1))
    responses = [session.clients[u].unmask(session.survivors) for u in session.survivors]
    for response in responses:
        assert set(response.self_mask_shares) <= set(session.survivors)
        assert set(response.mask_key_shares) == {0, 1}


def test_a_client_refuses_to_reveal_both_secrets_of_one_client(drive) -> None:
    session = drive(8, 3, 32, drop_before_masking=(0,))
    client = session.clients[5]
    client.unmask(session.survivors)  # reveals the self-mask share of client 7
    with pytest.raises(ProtocolError, match="both secrets"):
        client.unmask([u for u in session.survivors if u != 7])  # now asks for 7's masking key
    # Asking again for the same thing is harmless and answered.
    client.unmask(session.survivors)


def test_a_client_refuses_requests_that_could_unmask_it(drive) -> None:
    session = drive(8, 4, 32)
    client = session.clients[3]
    with pytest.raises(ProtocolError, match="dropped although it sent"):
        client.unmask([u for u in session.survivors if u != 3])
    with pytest.raises(ProtocolError, match="fewer than the threshold"):
        client.unmask([3, 4, 5])
    with pytest.raises(ProtocolError, match="never advertised"):
        client.unmask([*session.survivors, 99])


def test_the_server_refuses_misrouted_or_mixed_shares(drive) -> None:
    session = drive(6, 3, 16, drop_before_masking=(0,))
    responses = [session.clients[u].unmask(session.survivors) for u in session.survivors]
    forged = UnmaskingShares(
        responses[0].sender,
        {**responses[0].self_mask_shares, 0: Share(1, bytes(64))},
        responses[0].mask_key_shares,
    )
    with pytest.raises(ProtocolError, match="both secrets"):
        session.server.unmask([forged, *responses[1:]])


def test_sparse_clients_refuse_a_disconnected_survivor_set(drive) -> None:
    session = drive(12, 2, 16, mode="sparse")
    graph = session.clients[0]._setup.graph  # public information
    # Survivors = client 0 and one client that is not its neighbour: disconnected.
    stranger = next(u for u in range(12) if u != 0 and u not in graph[0])
    with pytest.raises(ProtocolError, match="disconnected"):
        session.clients[0].unmask([0, stranger])
