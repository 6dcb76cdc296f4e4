"""Protocol versions (docs/secure-aggregation.md §Protocol versions): version 2 masks with
AES-128-CTR, version 1 (ChaCha20) stays readable, and a session refuses to mix them."""

from __future__ import annotations

import pickle
import re

import numpy as np
import pytest
from Crypto.Cipher import AES  # PyCryptodome: an implementation independent of `cryptography`

from accounting.choices import SecaggMode
from accounting.errors import InvalidInputError
from trainer.secagg import Client, ProtocolError, Server, choose_params, new_session, plain_sum, secure_sum
from trainer.secagg.messages import AdvertisedKeys
from trainer.secagg.params import SecAggParams
from trainer.secagg.prg import DEFAULT_PROTOCOL_VERSION, LATEST_PROTOCOL_VERSION, add_masks, expand_mask


def vectors(count: int, dimension: int = 40) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(count)
    return {u: rng.uniform(-1, 1, dimension) for u in range(count)}


def test_version_2_masks_are_the_aes_128_ctr_keystream_and_version_1_stays_chacha20() -> None:
    key = bytes(range(32))
    words = expand_mask(key, 64, 32, version=2)
    reference = AES.new(key[:16], AES.MODE_CTR, nonce=b"", initial_value=bytes(16)).encrypt(bytes(256))
    assert np.array_equal(words, np.frombuffer(reference, dtype="<u4"))
    assert not np.array_equal(words, expand_mask(key, 64, 32, version=1))
    total = np.zeros(64, dtype=np.uint32)
    assert add_masks(total, [(key, 1)], version=2) == 256 and np.array_equal(total, words)
    with pytest.raises(ValueError, match="unknown secure-aggregation protocol version 3"):
        expand_mask(key, 4, 32, version=3)


@pytest.mark.parametrize("mode", ["full", "sparse"])
def test_both_versions_release_the_same_sum_with_dropouts(mode: SecaggMode) -> None:
    data = vectors(12)
    results = {}
    for version in (1, 2):
        params = choose_params(12, 5, 1.0, mode=mode, neighbours=6 if mode == "sparse" else None,
                               protocol_version=version)
        assert params.protocol_version == version
        serial = secure_sum(data, params, seed=3, drop_before_masking=[2], drop_before_unmasking=[5])
        forked = secure_sum(data, params, seed=3, drop_before_masking=[2], drop_before_unmasking=[5], workers=2)
        assert forked.sum is not None and serial.sum is not None
        assert np.array_equal(forked.sum, serial.sum)
        results[version] = serial.sum
    survivors = {u: v for u, v in data.items() if u != 2}
    assert np.array_equal(results[1], results[2])
    assert np.array_equal(results[2], plain_sum(survivors, choose_params(12, 5, 1.0), seed=3))


def test_the_default_is_version_1_and_a_message_without_a_version_reads_as_version_1() -> None:
    """What every party spoke before versions: a session or a key message that states none."""
    assert DEFAULT_PROTOCOL_VERSION == 1 and LATEST_PROTOCOL_VERSION == 2
    assert choose_params(3, 2, 1.0).protocol_version == 1
    setup = new_session(range(3), choose_params(3, 2, 1.0), seed=1)
    client = Client(0, np.zeros(4), choose_params(3, 2, 1.0, protocol_version=2), setup, seed=1)
    advertised = client.advertise_keys()
    assert advertised.protocol_version == 2 and pickle.loads(pickle.dumps(advertised)) == advertised
    old = AdvertisedKeys(0, advertised.cipher_public_key, advertised.mask_public_key)  # an old client's message
    assert old.protocol_version == 1


def session_parties(server_version: int, versions: dict[int, int]) -> tuple[Server, dict[int, Client]]:
    params = {v: choose_params(len(versions), 2, 1.0, protocol_version=v) for v in set(versions.values()) | {server_version}}
    setup = new_session(versions, params[server_version], seed=4)
    clients = {u: Client(u, np.zeros(8), params[v], setup, seed=4) for u, v in versions.items()}
    return Server(params[server_version], setup), clients


@pytest.mark.parametrize(("server_version", "odd_one"), [(2, 1), (1, 2)])
def test_a_session_refuses_to_mix_versions_with_a_clear_error(server_version: int, odd_one: int) -> None:
    versions = {0: server_version, 1: odd_one, 2: server_version}
    server, clients = session_parties(server_version, versions)
    names = {1: "v1 (chacha20 masks)", 2: "v2 (aes-128-ctr masks)"}
    with pytest.raises(ProtocolError) as error:
        server.collect_keys([c.advertise_keys() for c in clients.values()])
    message = str(error.value)
    assert f"client 1 speaks secure-aggregation protocol {names[odd_one]}, this session {names[server_version]}" in message
    assert "old and new clients cannot be mixed" in message
    # a client refuses too, before it shares a secret with a peer of another version
    roster = {u: c.advertise_keys() for u, c in clients.items()}
    with pytest.raises(ProtocolError, match="client 1 speaks secure-aggregation protocol .* cannot be mixed"):
        clients[0].share_keys(roster)
    with pytest.raises(ProtocolError, match=re.escape(f"client 0 speaks secure-aggregation protocol {names[server_version]}")):
        clients[1].share_keys(roster)


def test_an_unknown_version_is_refused_naming_the_field() -> None:
    for version in (0, 3, True):
        with pytest.raises(InvalidInputError) as error:
            SecAggParams(3, 2, 1.0, 1.0, 30, protocol_version=version)
        assert error.value.field == "protocol_version"


def test_the_round_engine_runs_the_latest_version() -> None:
    from tests.trainer.test_rounds import make_engine
    from tests.trainer.trainer_plans import hand_plan
    from trainer.units.client.rounds import session_graph

    plan = hand_plan([("a", 2.0, 20, 0.5)], [("pa", ["a"], 1.0, 4, 1.0)], model_dim=16, rounds=2)
    engine = make_engine(plan, 16)
    mechanism = engine.mechanisms[0]
    params = engine._session_params(mechanism, session_graph(plan, "full", 10), 10)
    assert params.protocol_version == LATEST_PROTOCOL_VERSION
