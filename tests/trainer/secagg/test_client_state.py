"""A deployment's client: fresh secrets, and a new process (restored from its state) for every round."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from trainer.secagg import Client, ClientSecrets, ProtocolError, Server, choose_params, new_session, plain_sum


def grid_vectors(count: int, dimension: int, scale: float, bound: float, seed: int) -> dict[int, np.ndarray]:
    """Vectors on the grid Z / scale, as the round engine hands them over (encoding is exact)."""
    rng = np.random.default_rng(seed)
    return {u: np.round(rng.uniform(-bound, bound, dimension) * scale) / scale for u in range(count)}


def restored(params, setup, state):
    """The client as a fresh process would rebuild it: from a deep copy of its stored state."""
    return Client.restore(params, setup, copy.deepcopy(state))


@pytest.mark.parametrize(("before_masking", "before_unmasking"), [((), ()), ((2,), ()), ((1,), (4,))])
def test_restored_clients_with_fresh_secrets_release_the_survivors_plain_sum(before_masking, before_unmasking):
    params = choose_params(6, 3, 2.0)
    vectors = grid_vectors(6, 300, params.scale, 1.5, seed=1)
    setup = new_session(list(vectors), params, None)
    server = Server(params, setup)
    states = {u: Client(u, vectors[u], params, setup, None).state() for u in vectors}

    def step(u, call):
        client = restored(params, setup, states[u])
        result = call(client)
        states[u] = client.state()
        return result

    roster = server.collect_keys([step(u, lambda c: c.advertise_keys()) for u in vectors])
    inboxes = server.route_shares([m for u in roster for m in step(u, lambda c: c.share_keys(roster))])
    masked = [step(u, lambda c, u=u: c.masked_input(inboxes[u])) for u in inboxes if u not in before_masking]
    survivors = server.collect_masked_inputs(masked)
    responses = [step(u, lambda c: c.unmask(survivors)) for u in survivors if u not in before_unmasking]
    total = server.unmask(responses)

    assert set(survivors) == set(vectors) - set(before_masking)
    expected = plain_sum({u: vectors[u] for u in survivors}, params, seed=0)
    np.testing.assert_array_equal(total, expected)
    np.testing.assert_array_equal(total, sum(vectors[u] for u in survivors))


def test_fresh_secrets_differ_between_clients_and_sessions():
    first, second = ClientSecrets.generate(), ClientSecrets.generate()
    assert len({first.cipher_key, first.mask_key, first.self_mask_seed, second.cipher_key}) == 4
    params = choose_params(2, 2, 1.0)
    one = new_session([0, 1], params, None)
    two = new_session([0, 1], params, None)
    assert one.session_id != two.session_id


def test_a_client_answers_each_round_once_and_in_order():
    params = choose_params(3, 2, 1.0)
    vectors = grid_vectors(3, 50, params.scale, 0.5, seed=2)
    setup = new_session(list(vectors), params, None)
    clients = {u: Client(u, vectors[u], params, setup, None) for u in vectors}
    server = Server(params, setup)
    roster = server.collect_keys([c.advertise_keys() for c in clients.values()])
    with pytest.raises(ProtocolError, match="before this client sent its masked input"):
        clients[0].unmask([0, 1, 2])
    inboxes = server.route_shares([m for c in clients.values() for m in c.share_keys(roster)])
    with pytest.raises(ProtocolError, match="already shared"):
        clients[0].share_keys(roster)
    clients[0].masked_input(inboxes[0])
    # Restoring the state does not reset the guard: a new process refuses a second y_u too.
    again = Client.restore(params, setup, clients[0].state())
    with pytest.raises(ProtocolError, match="already sent"):
        again.masked_input([])


def test_restore_refuses_a_state_from_another_session_shape():
    params = choose_params(3, 2, 1.0)
    setup = new_session([0, 1, 2], params, None)
    state = Client(0, np.zeros(10), params, setup, None).state()
    other = new_session([5, 6, 7], params, None)
    with pytest.raises(ProtocolError, match="not a participant"):
        Client.restore(params, other, state)
    wide = choose_params(3, 2, 1.0, scale=2.0**40)
    with pytest.raises(ProtocolError, match="modulus"):
        Client.restore(wide, setup, state)
