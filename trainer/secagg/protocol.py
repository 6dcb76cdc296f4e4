"""``secure_sum``: run one secure-aggregation session over simulated clients; ``plain_sum``: its reference.

``docs/secure-aggregation.md``, "Protocol rounds" and "Dropout recovery". This module is
the network: it builds the clients (with the inputs) and the server (with the public setup
only) and carries messages between them, dropping the clients the caller names:

- ``drop_before_masking``: share keys in round 1 (they are in U2), never send y_u; their
  pairwise masks are removed with their masking keys, reconstructed from survivors' shares.
- ``drop_before_unmasking``: send y_u (they are in U3, their input is in the sum) and then
  vanish; their self masks are removed with b_u, reconstructed from the others' shares.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from accounting.errors import InvalidInputError
from trainer.secagg import keys
from trainer.secagg.client import Client, encode_input
from trainer.secagg.encoding import decode_sum, modulus_mask, word_dtype
from trainer.secagg.errors import SessionAborted
from trainer.secagg.graph import neighbour_sets
from trainer.secagg.messages import AdvertisedKeys, EncryptedShare, MaskedInput, SessionSetup, UnmaskingShares
from trainer.secagg.parallel import ForkedClients, fork_available
from trainer.secagg.params import SecAggParams
from trainer.secagg.server import Server

MAX_CLIENT_ID = 2**32 - 1
# the protocol's timed stages, in order (docs/secure-aggregation.md; "phase" is accounting's word)
STAGES = ("encode", "advertise_keys", "share_keys", "masked_input", "unmasking_clients", "unmasking_server")


@dataclass
class SecAggResult:
    """Outcome of one session.

    ``sum`` is the decoded float64 sum of the inputs of ``survivors`` (U3), or ``None`` when
    the session ``aborted`` (then ``reason`` says why and nothing was released).
    ``survivors`` is U3, the clients whose masked inputs the server accepted (empty when
    the session aborted before that); ``dropped`` are the other participants. ``seconds`` holds the
    time per stage (wall time of all simulated clients, serial or across ``workers``)
    and ``total``.
    """

    sum: np.ndarray | None
    aborted: bool
    survivors: list[int]
    dropped: list[int]
    reason: str | None
    seconds: dict[str, float] = field(default_factory=dict)
    keystream_bytes: int = 0  # mask keystream the clients and the server expanded (0: exact-sum)


def new_session(participants: Collection[int], params: SecAggParams, seed: int | None) -> SessionSetup:
    """The public session setup: a fresh session id and the share/mask graph (complete or Harary).

    In simulation both come from the run seed; a deployment's server (``seed=None``) draws
    them with os.urandom.
    """
    if seed is None:
        session_id, order_bytes = os.urandom(16), os.urandom(16)
    else:
        session_id = keys.derive_bytes(seed, "server", "session-id", 16)
        order_bytes = keys.derive_bytes(seed, "server", "graph-order", 16)
    order_seed = int.from_bytes(order_bytes, "big")
    ids = tuple(sorted(participants))
    neighbours = params.neighbours if params.mode == "sparse" else None
    return SessionSetup(session_id=session_id, participants=ids, graph=neighbour_sets(ids, neighbours, order_seed))


def secure_sum(
    vectors: Mapping[int, np.ndarray],
    params: SecAggParams,
    *,
    seed: int,
    drop_before_masking: Collection[int] = (),
    drop_before_unmasking: Collection[int] = (),
    workers: int = 1,
) -> SecAggResult:
    """The sum of the clients' vectors as released by the protocol, or an abort.

    Each vector must satisfy |x| <= params.value_bound coordinatewise (``InvalidInputError``
    otherwise); at most ``params.num_clients`` clients. The result equals ``plain_sum`` of
    the survivors' vectors with the same seed exactly (the same randomised rounding).
    ``workers > 1`` runs the clients in that many processes (``trainer.secagg.parallel``);
    the result is the same bit for bit.
    """
    result, _ = run_session(
        vectors,
        params,
        seed=seed,
        drop_before_masking=drop_before_masking,
        drop_before_unmasking=drop_before_unmasking,
        workers=workers,
    )
    return result


class LocalClients:
    """The session's clients in this process (the serial path; same interface as ``ForkedClients``)."""

    def __init__(self, vectors: Mapping[int, np.ndarray], ids: list[int], params: SecAggParams,
                 setup: SessionSetup, seed: int) -> None:
        self._clients = {u: Client(u, vectors[u], params, setup, seed) for u in ids}

    def advertise_keys(self) -> list[AdvertisedKeys]:
        return [client.advertise_keys() for client in self._clients.values()]

    def share_keys(self, roster: Mapping[int, AdvertisedKeys]) -> list[EncryptedShare]:
        return [message for u in roster for message in self._clients[u].share_keys(roster)]

    def masked_input(self, inboxes: Mapping[int, Sequence[EncryptedShare]]) -> list[MaskedInput]:
        return [self._clients[u].masked_input(inbox) for u, inbox in inboxes.items()]

    def unmask(self, survivors: Sequence[int], responders: Sequence[int]) -> list[UnmaskingShares]:
        return [self._clients[u].unmask(survivors) for u in responders]

    def close(self) -> None:
        self._clients = {}


def run_session(
    vectors: Mapping[int, np.ndarray],
    params: SecAggParams,
    *,
    seed: int,
    drop_before_masking: Collection[int] = (),
    drop_before_unmasking: Collection[int] = (),
    workers: int = 1,
) -> tuple[SecAggResult, Server]:
    """``secure_sum`` that also returns the server, whose ``received`` log audits what it saw."""
    ids = check_vectors(vectors, params)
    before_masking, before_unmasking = check_drops(ids, drop_before_masking, drop_before_unmasking)
    seconds = dict.fromkeys(STAGES, 0.0)
    started = time.perf_counter()
    clock = _Clock(seconds)

    setup = new_session(ids, params, seed)
    with clock("encode"):
        if workers > 1 and len(ids) > 1 and fork_available():
            clients: LocalClients | ForkedClients = ForkedClients(vectors, ids, params, setup, seed, workers)
        else:
            clients = LocalClients(vectors, ids, params, setup, seed)
    server = Server(params, setup)
    survivors: tuple[int, ...] = ()
    total: np.ndarray | None = None
    reason: str | None = None
    client_masks = 0
    try:
        with clock("advertise_keys"):
            roster = server.collect_keys(clients.advertise_keys())
        with clock("share_keys"):
            inboxes = server.route_shares(clients.share_keys(roster))
        with clock("masked_input"):
            sending = {u: inbox for u, inbox in inboxes.items() if u not in before_masking}
            client_masks = sum(1 + len(inbox) for inbox in sending.values())
            survivors = server.collect_masked_inputs(clients.masked_input(sending))
        with clock("unmasking_clients"):
            responses = clients.unmask(survivors, [u for u in survivors if u not in before_unmasking])
        with clock("unmasking_server"):
            total = server.unmask(responses)
    except SessionAborted as abort:
        reason = abort.reason
    finally:
        clients.close()
    seconds["total"] = time.perf_counter() - started
    included = set(survivors)
    dimension = len(vectors[ids[0]])
    result = SecAggResult(
        sum=total,
        aborted=total is None,
        survivors=list(survivors),
        dropped=[u for u in ids if u not in included],
        reason=reason,
        seconds=seconds,
        keystream_bytes=client_masks * dimension * word_dtype(params.modulus_bits).itemsize + server.keystream_bytes,
    )
    return result, server


def plain_sum(vectors: Mapping[int, np.ndarray], params: SecAggParams, *, seed: int) -> np.ndarray:
    """Reference: the same per-client randomised rounding, summed in Z_(2^b) and decoded, no masks.

    ``secure_sum`` over survivors U3 must equal ``plain_sum`` of U3's vectors bit for bit
    (for a session of ``residues``: the undecoded sum mod 2^b).
    """
    ids = check_vectors(vectors, params)
    bits = params.modulus_bits
    total = np.zeros(len(next(iter(vectors.values()))), dtype=word_dtype(bits))
    for u in ids:
        total += encode_input(vectors[u], params, keys.rounding_rng(seed, u), f"vectors[{u}]")
    if params.encoding == "residues":
        return total & total.dtype.type(modulus_mask(bits))
    return decode_sum(total, scale=params.scale, modulus_bits=bits)


class _Clock:
    """Adds the wall time of a ``with clock(stage):`` block to ``seconds[stage]``."""

    def __init__(self, seconds: dict[str, float]) -> None:
        self._seconds = seconds
        self._stage = ""
        self._start = 0.0

    def __call__(self, stage: str) -> _Clock:
        self._stage = stage
        return self

    def __enter__(self) -> None:
        self._start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self._seconds[self._stage] += time.perf_counter() - self._start


def check_vectors(vectors: Mapping[int, np.ndarray], params: SecAggParams) -> list[int]:
    if not vectors:
        raise InvalidInputError("vectors", "at least one client vector is needed")
    if len(vectors) > params.num_clients:
        raise InvalidInputError(
            "vectors",
            f"{len(vectors)} clients exceed num_clients={params.num_clients} that the modulus was sized for",
        )
    lengths = set()
    for u, vector in vectors.items():
        if not isinstance(u, (int, np.integer)) or isinstance(u, bool) or not 0 <= int(u) <= MAX_CLIENT_ID:
            raise InvalidInputError("vectors", f"client ids must be integers in [0, 2^32), got {u!r}")
        shape = np.shape(vector)
        if len(shape) != 1 or shape[0] < 1:
            raise InvalidInputError(f"vectors[{u}]", f"must be a non-empty 1-D vector, got shape {shape}")
        lengths.add(shape[0])
    if len(lengths) > 1:
        raise InvalidInputError("vectors", f"all vectors must have the same length, got {sorted(lengths)}")
    return sorted(int(u) for u in vectors)


def check_drops(
    ids: list[int], drop_before_masking: Collection[int], drop_before_unmasking: Collection[int]
) -> tuple[set[int], set[int]]:
    """The two dropout sets, refused if they name non-participants or overlap."""
    before_masking = _check_drop_set(drop_before_masking, ids, "drop_before_masking")
    before_unmasking = _check_drop_set(drop_before_unmasking, ids, "drop_before_unmasking")
    if before_masking & before_unmasking:
        raise InvalidInputError("drop_before_unmasking", "a client cannot drop out twice")
    return before_masking, before_unmasking


def _check_drop_set(drops: Collection[int], ids: list[int], field_name: str) -> set[int]:
    chosen = {int(u) for u in drops}
    unknown = chosen - set(ids)
    if unknown:
        raise InvalidInputError(field_name, f"clients {sorted(unknown)} are not participants")
    return chosen
