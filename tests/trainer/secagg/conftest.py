"""Helpers for the secure-aggregation tests: drive a session round by round by hand."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from trainer.secagg.client import Client
from trainer.secagg.params import SecAggParams, choose_params
from trainer.secagg.protocol import new_session
from trainer.secagg.server import Server


@dataclass
class DrivenSession:
    """A session stopped after round 2: the survivors U3 are known, nothing is unmasked yet."""

    params: SecAggParams
    vectors: dict[int, np.ndarray]
    clients: dict[int, Client]
    server: Server
    survivors: tuple[int, ...]


def _drive(
    num_clients: int,
    threshold: int,
    dimension: int,
    *,
    mode: str = "full",
    seed: int = 0,
    drop_before_masking: tuple[int, ...] = (),
    value_bound: float = 1.0,
) -> DrivenSession:
    params = choose_params(num_clients, threshold, value_bound, mode=mode)
    rng = np.random.default_rng(seed)
    vectors = {u: rng.uniform(-value_bound, value_bound, dimension) for u in range(num_clients)}
    setup = new_session(list(vectors), params, seed)
    clients = {u: Client(u, vectors[u], params, setup, seed) for u in vectors}
    server = Server(params, setup)
    roster = server.collect_keys([c.advertise_keys() for c in clients.values()])
    inboxes = server.route_shares([m for c in clients.values() for m in c.share_keys(roster)])
    masked = [clients[u].masked_input(inboxes[u]) for u in inboxes if u not in drop_before_masking]
    survivors = server.collect_masked_inputs(masked)
    return DrivenSession(params, vectors, clients, server, survivors)


@pytest.fixture
def drive() -> Callable[..., DrivenSession]:
    return _drive
