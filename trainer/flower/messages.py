"""The secure-aggregation protocol as Flower records (docs/flower.md §2).

One round of a plan is four exchanges between the ServerApp and the sampled nodes, all
pools at once (one ``trainer.secagg`` session per pool):

==================  =====================================  ======================================
message type        server -> node                         node -> server
==================  =====================================  ======================================
``KEYS``            the session (pool, participants,       c_u^PK, s_u^PK
                    parameters, round) + global model
``SHARES``          the roster of U1's public keys         one ciphertext per share holder
``MASKED``          the ciphertexts addressed to the node  y_u (words mod 2^b)
``UNMASK``          the survivors U3                       shares of b_v or s_v^SK (never both)
==================  =====================================  ======================================

``HELLO`` (once per node and run) asks a node for its group and its plan's fingerprint.
``PERSONAL`` (evaluated rounds, strategies with per-client models) asks a node for its own
model's scores on its own test rows: the one metric a node sends, in the clear, unless its
node config says ``gdpfed-personal-metrics = false`` (docs/flower.md §2, "Per-client state").
With adaptive clipping the ``KEYS`` session names the round's clip ``S^t``.

**Protocol version and mechanism** (docs/flower.md §2 "The discrete mechanism and the wire
version"). The ``KEYS`` session states the secure-aggregation protocol version
(``protocol_version``: the mask generator, ``trainer.secagg.prg.PRG_OF_VERSION``) and the
run's noise mechanism (``secagg_mechanism``); a session of a discrete pool also states its
encoding (``residues``), bit width, scale, share variance and the round's public rotation
seed. The ``HELLO`` reply states the version and mechanism the node runs, and each
advertised key its sender's version, as ``trainer.secagg`` messages do. A record that states
no version is version 1 (ChaCha20), what every node spoke before the wire stated one; one
that states no mechanism is ``gaussian_continuous``. This gdpfed speaks ``PROTOCOL_VERSION``.

A reply never names its sender: the server takes it from the message's source node (which
Flower authenticates), so one node cannot answer for another. Nothing here carries a
plaintext update or an example count. The client's secrets stay in its
``Context.state`` (``state_to_records``), which Flower keeps on the node, and so does the
strategy's state of its client (``record_client_state``: a personal model), and the discrete
blocks the node derived from its own plan copy (``record_derived_blocks``).

numpy, ``flwr.app`` and ``trainer.secagg`` only: the ClientApp imports this module in
every message's process.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, get_args

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from accounting.choices import SecaggMechanism
from planner.schema import DiscreteMechanism, SecaggMode
from trainer.secagg import ClientSecrets, ClientState, ProtocolError, SecAggParams
from trainer.secagg.graph import neighbour_sets
from trainer.secagg.messages import AdvertisedKeys, EncryptedShare, MaskedInput, SessionSetup, UnmaskingShares
from trainer.secagg.params import InputEncoding
from trainer.secagg.prg import DEFAULT_PROTOCOL_VERSION, LATEST_PROTOCOL_VERSION, PRG_OF_VERSION
from trainer.secagg.shamir import Share

HELLO = "query.gdpfed_hello"
KEYS = "train.gdpfed_keys"
SHARES = "train.gdpfed_shares"
MASKED = "train.gdpfed_masked"
UNMASK = "train.gdpfed_unmask"
# The server asks a node for its own model's scores on its own test rows (per-client models).
PERSONAL = "evaluate.gdpfed_personal"
PROTOCOL_STEPS = (KEYS, SHARES, MASKED, UNMASK)

SESSION = "gdpfed.session"
GLOBAL = "gdpfed.global"
REPLY = "gdpfed.reply"
MASKED_VECTOR = "gdpfed.masked"
STATE = "gdpfed.client"
STATE_INPUT = "gdpfed.client_input"
JOINED = "gdpfed.joined"  # the last round this node took part in (kept on the node)
CLIENT_STATE = "gdpfed.client_state"  # the strategy's state of this node's client (kept on the node)
# the discrete blocks this node derived from its own plan copy (kept on the node, never sent)
DERIVED_BLOCKS = "gdpfed.derived_blocks"

# The secure-aggregation protocol version this gdpfed's server and nodes speak on the Flower
# wire (the simulator's: AES-128-CTR masks). A record without one is DEFAULT_PROTOCOL_VERSION.
PROTOCOL_VERSION = LATEST_PROTOCOL_VERSION
# What a record that names no mechanism runs (every node before the wire named one).
DEFAULT_MECHANISM: SecaggMechanism = "gaussian_continuous"


@dataclass(frozen=True)
class DiscreteSession:
    """What a discrete pool's session states beyond its residue parameters: the block's scale
    and share variance, and the round's public rotation seed (the bit width is the session's
    ``modulus_bits``). A node compares each with what its own plan and run derive."""

    scale: float
    share_variance: float
    rotation_seed: int


@dataclass(frozen=True)
class Session:
    """Server -> node with ``KEYS``: which pool session of which round, and its public setup.

    ``participants`` are Flower node ids; a node's index in the tuple is its client id in
    the session (``trainer.secagg`` ids are small integers). ``graph`` is the share graph
    over those indices (complete in full mode, Harary in sparse mode).
    """

    pool_id: str
    global_round: int
    plan_fingerprint: str
    session_id: bytes
    participants: tuple[int, ...]
    params: SecAggParams
    graph: dict[int, tuple[int, ...]]
    # adaptive clipping's S^t for this round (None: the plan's fixed clip norms); the node
    # derives the noise from it and its own plan, so S^t never changes the privacy spent
    clip_norm: float | None = None
    # the run's noise mechanism; a discrete pool's session also states its block (else None)
    mechanism: SecaggMechanism = DEFAULT_MECHANISM
    discrete: DiscreteSession | None = None

    @property
    def setup(self) -> SessionSetup:
        return SessionSetup(self.session_id, tuple(range(len(self.participants))), self.graph)

    def index_of(self, node_id: int) -> int:
        try:
            return self.participants.index(node_id)
        except ValueError:
            raise ProtocolError(f"node {node_id} is not a participant of pool {self.pool_id}'s session") from None


def session_record(session: Session) -> ConfigRecord:
    params = session.params
    record = ConfigRecord(
        {
            "pool_id": session.pool_id,
            "global_round": session.global_round,
            "plan_fingerprint": session.plan_fingerprint,
            "session_id": session.session_id,
            "participants": [str(node) for node in session.participants],
            "num_clients": params.num_clients,
            "threshold": params.threshold,
            "value_bound": params.value_bound,
            "scale": params.scale,
            "modulus_bits": params.modulus_bits,
            "mode": params.mode,
            "neighbours": params.neighbours if params.neighbours is not None else 0,
            "share_threshold": params.share_threshold if params.share_threshold is not None else 0,
            "protocol_version": params.protocol_version,
            "encoding": params.encoding,
            "secagg_mechanism": session.mechanism,
        }
    )
    if session.clip_norm is not None:
        record["clip_norm"] = session.clip_norm
    if session.discrete is not None:
        record["discrete_scale"] = session.discrete.scale
        record["share_variance"] = session.discrete.share_variance
        # a 64-bit unsigned seed: Flower's integers are signed 64-bit, so it travels as text
        record["rotation_seed"] = str(session.discrete.rotation_seed)
    if params.mode == "sparse":
        # CSR form of the Harary graph: the neighbours of index i are neighbours[offsets[i]:offsets[i+1]].
        offsets: list[int] = [0]
        flat: list[int] = []
        for index in range(len(session.participants)):
            flat.extend(session.graph[index])
            offsets.append(len(flat))
        record["graph_offsets"] = offsets
        record["graph_neighbours"] = flat
    return record


def session_from_record(record: ConfigRecord) -> Session:
    mode = _str(record, "mode")
    if mode not in get_args(SecaggMode):
        raise ProtocolError(f"unknown secure-aggregation mode {mode!r}")
    encoding = _str(record, "encoding") if "encoding" in record else "fixed_point"
    if encoding not in get_args(InputEncoding):
        raise ProtocolError(f"unknown secure-aggregation input encoding {encoding!r}")
    mechanism = _str(record, "secagg_mechanism") if "secagg_mechanism" in record else DEFAULT_MECHANISM
    if mechanism not in get_args(SecaggMechanism):
        raise ProtocolError(f"unknown noise mechanism {mechanism!r}")
    version = protocol_version_of(record)
    params = SecAggParams(
        num_clients=_int(record, "num_clients"),
        threshold=_int(record, "threshold"),
        value_bound=_float(record, "value_bound"),
        scale=_float(record, "scale"),
        modulus_bits=_int(record, "modulus_bits"),
        mode="sparse" if mode == "sparse" else "full",
        neighbours=_int(record, "neighbours") if mode == "sparse" else None,
        share_threshold=(_int(record, "share_threshold") or None) if mode == "sparse" else None,
        encoding="residues" if encoding == "residues" else "fixed_point",
        protocol_version=version,
    )
    participants = tuple(int(node) for node in _strs(record, "participants"))
    if len(set(participants)) != len(participants) or len(participants) > params.num_clients:
        raise ProtocolError("the session's participant list repeats a node or exceeds num_clients")
    if mode == "sparse":
        offsets = _ints(record, "graph_offsets")
        flat = _ints(record, "graph_neighbours")
        if len(offsets) != len(participants) + 1:
            raise ProtocolError("the session's graph does not match its participants")
        graph = {i: tuple(flat[offsets[i] : offsets[i + 1]]) for i in range(len(participants))}
    else:
        graph = neighbour_sets(range(len(participants)), None, 0)
    clip_norm = _float(record, "clip_norm") if "clip_norm" in record else None
    if clip_norm is not None and not (math.isfinite(clip_norm) and clip_norm > 0):
        raise ProtocolError(f"the session's clip norm {clip_norm!r} is not a positive number")
    discrete = None
    if "rotation_seed" in record:
        try:
            seed = int(_str(record, "rotation_seed"))
        except ValueError:
            raise ProtocolError("record field 'rotation_seed' is not an integer") from None
        discrete = DiscreteSession(_float(record, "discrete_scale"), _float(record, "share_variance"), seed)
    return Session(
        pool_id=_str(record, "pool_id"),
        global_round=_int(record, "global_round"),
        plan_fingerprint=_str(record, "plan_fingerprint"),
        session_id=_bytes(record, "session_id"),
        participants=participants,
        params=params,
        graph=graph,
        clip_norm=clip_norm,
        mechanism="skellam" if mechanism == "skellam" else "gaussian_continuous",
        discrete=discrete,
    )


def protocol_version_of(record: ConfigRecord) -> int:
    """The protocol version a record states (``protocol_version``), 1 where it states none."""
    return _int(record, "protocol_version") if "protocol_version" in record else DEFAULT_PROTOCOL_VERSION


def version_refusal(version: int) -> str:
    """Why a node that speaks protocol ``version`` is left out of this server's run."""
    def named(v: int) -> str:
        return f"v{v} ({PRG_OF_VERSION.get(v, 'unknown')} masks)"

    return (f"speaks secure-aggregation protocol {named(version)}, this server {named(PROTOCOL_VERSION)}: "
            "nodes of another version cannot join its sessions (their masks would not cancel); run the same "
            "gdpfed on every node")


def mechanism_of(record: ConfigRecord) -> str:
    """The noise mechanism a ``HELLO`` reply states (``secagg_mechanism``), the continuous one where none."""
    return _str(record, "secagg_mechanism") if "secagg_mechanism" in record else DEFAULT_MECHANISM


def keys_request(session: Session, global_params: np.ndarray) -> RecordDict:
    return RecordDict(
        {SESSION: session_record(session), GLOBAL: ArrayRecord({"params": Array(np.ascontiguousarray(global_params))})}
    )


def global_params_of(content: RecordDict) -> np.ndarray:
    return np.asarray(content.array_records[GLOBAL]["params"].numpy())


def session_of(content: RecordDict) -> Session:
    return session_from_record(content.config_records[SESSION])


def session_ref(session: Session) -> ConfigRecord:
    """What the later steps carry to name the session: its id and pool."""
    return ConfigRecord({"session_id": session.session_id, "pool_id": session.pool_id})


def check_session_ref(content: RecordDict, session: Session) -> None:
    """Refuse a step addressed to any session but the one this node joined (``KEYS``)."""
    ref = content.config_records[SESSION]
    if _bytes(ref, "session_id") != session.session_id or _str(ref, "pool_id") != session.pool_id:
        raise ProtocolError(
            f"the request names pool {_str(ref, 'pool_id')}'s session, but this node takes part in "
            f"pool {session.pool_id}'s session of round {session.global_round}"
        )


# ---- KEYS reply


def keys_reply(keys: AdvertisedKeys) -> RecordDict:
    return RecordDict({REPLY: ConfigRecord({"cipher_public_key": keys.cipher_public_key,
                                            "mask_public_key": keys.mask_public_key,
                                            "protocol_version": keys.protocol_version})})


def keys_from_reply(content: RecordDict, sender: int) -> AdvertisedKeys:
    record = content.config_records[REPLY]
    return AdvertisedKeys(sender, _bytes(record, "cipher_public_key"), _bytes(record, "mask_public_key"),
                          protocol_version_of(record))


# ---- SHARES


def shares_request(session: Session, roster: dict[int, AdvertisedKeys]) -> RecordDict:
    ids = sorted(roster)
    record = ConfigRecord(
        {
            "roster": ids,
            "cipher_public_keys": [roster[u].cipher_public_key for u in ids],
            "mask_public_keys": [roster[u].mask_public_key for u in ids],
            "protocol_versions": [roster[u].protocol_version for u in ids],
        }
    )
    return RecordDict({SESSION: session_ref(session), REPLY: record})


def roster_of(content: RecordDict) -> dict[int, AdvertisedKeys]:
    record = content.config_records[REPLY]
    ids = _ints(record, "roster")
    ciphers = _bytes_list(record, "cipher_public_keys")
    masks = _bytes_list(record, "mask_public_keys")
    # a roster that states no versions is of version 1 peers
    versions = _ints(record, "protocol_versions") if "protocol_versions" in record else [DEFAULT_PROTOCOL_VERSION] * len(ids)
    if not len(ids) == len(ciphers) == len(masks) == len(versions):
        raise ProtocolError("the roster's lists differ in length")
    return {u: AdvertisedKeys(u, c, m, v) for u, c, m, v in zip(ids, ciphers, masks, versions)}


def shares_reply(shares: list[EncryptedShare]) -> RecordDict:
    record = ConfigRecord({"recipients": [s.recipient for s in shares], "ciphertexts": [s.ciphertext for s in shares]})
    return RecordDict({REPLY: record})


def shares_from_reply(content: RecordDict, sender: int) -> list[EncryptedShare]:
    record = content.config_records[REPLY]
    recipients = _ints(record, "recipients")
    ciphertexts = _bytes_list(record, "ciphertexts")
    if len(recipients) != len(ciphertexts):
        raise ProtocolError("the shares' lists differ in length")
    return [EncryptedShare(sender, v, c) for v, c in zip(recipients, ciphertexts)]


# ---- MASKED


def masked_request(session: Session, inbox: list[EncryptedShare]) -> RecordDict:
    record = ConfigRecord(
        {"senders": [m.sender for m in inbox], "recipients": [m.recipient for m in inbox],
         "ciphertexts": [m.ciphertext for m in inbox]}
    )
    return RecordDict({SESSION: session_ref(session), REPLY: record})


def inbox_of(content: RecordDict) -> list[EncryptedShare]:
    record = content.config_records[REPLY]
    senders = _ints(record, "senders")
    recipients = _ints(record, "recipients")
    ciphertexts = _bytes_list(record, "ciphertexts")
    if not len(senders) == len(recipients) == len(ciphertexts):
        raise ProtocolError("the inbox's lists differ in length")
    return [EncryptedShare(u, v, c) for u, v, c in zip(senders, recipients, ciphertexts)]


def masked_reply(masked: MaskedInput) -> RecordDict:
    return RecordDict({MASKED_VECTOR: ArrayRecord({"y": Array(np.ascontiguousarray(masked.masked))})})


def masked_from_reply(content: RecordDict, sender: int) -> MaskedInput:
    return MaskedInput(sender, np.asarray(content.array_records[MASKED_VECTOR]["y"].numpy()))


# ---- UNMASK


def unmask_request(session: Session, survivors: tuple[int, ...]) -> RecordDict:
    return RecordDict({SESSION: session_ref(session), REPLY: ConfigRecord({"survivors": list(survivors)})})


def survivors_of(content: RecordDict) -> list[int]:
    return _ints(content.config_records[REPLY], "survivors")


def unmask_reply(shares: UnmaskingShares) -> RecordDict:
    record = ConfigRecord()
    for kind, chosen in (("self_mask", shares.self_mask_shares), ("mask_key", shares.mask_key_shares)):
        owners = sorted(chosen)
        record[f"{kind}_owners"] = owners
        record[f"{kind}_x"] = [chosen[v].x for v in owners]
        record[f"{kind}_data"] = [chosen[v].data for v in owners]
    return RecordDict({REPLY: record})


def unmask_from_reply(content: RecordDict, sender: int) -> UnmaskingShares:
    record = content.config_records[REPLY]
    parts: list[dict[int, Share]] = []
    for kind in ("self_mask", "mask_key"):
        owners = _ints(record, f"{kind}_owners")
        xs = _ints(record, f"{kind}_x")
        data = _bytes_list(record, f"{kind}_data")
        if not len(owners) == len(xs) == len(data):
            raise ProtocolError("the unmasking shares' lists differ in length")
        parts.append({v: Share(x, d) for v, x, d in zip(owners, xs, data)})
    return UnmaskingShares(sender, parts[0], parts[1])


# ---- the client's state between messages (kept on the node, never sent)


def state_to_records(session: Session, state: ClientState) -> tuple[ConfigRecord, ArrayRecord]:
    record = session_record(session)
    secrets = state.secrets
    roster = sorted(state.roster)
    inbox = sorted(state.inbox)
    revealed = sorted(state.revealed)
    record.update(
        {
            "client_id": state.client_id,
            "cipher_key": secrets.cipher_key,
            "mask_key": secrets.mask_key,
            "self_mask_seed": secrets.self_mask_seed,
            "share_randomness": secrets.share_randomness,
            "roster": roster,
            "roster_cipher": [state.roster[u].cipher_public_key for u in roster],
            "roster_mask": [state.roster[u].mask_public_key for u in roster],
            "own_share_x": state.own_share.x if state.own_share is not None else 0,
            "own_share_data": state.own_share.data if state.own_share is not None else b"",
            "inbox": inbox,
            "inbox_ciphertexts": [state.inbox[u] for u in inbox],
            "revealed": revealed,
            "revealed_kinds": [state.revealed[u] for u in revealed],
            "masked_sent": state.masked_sent,
        }
    )
    return record, ArrayRecord({"x": Array(np.ascontiguousarray(state.encoded_input))})


def state_from_records(record: ConfigRecord, encoded: ArrayRecord) -> tuple[Session, ClientState]:
    session = session_from_record(record)
    roster = _ints(record, "roster")
    ciphers = _bytes_list(record, "roster_cipher")
    masks = _bytes_list(record, "roster_mask")
    inbox = _ints(record, "inbox")
    revealed = _ints(record, "revealed")
    share_data = _bytes(record, "own_share_data")
    state = ClientState(
        client_id=_int(record, "client_id"),
        secrets=ClientSecrets(
            _bytes(record, "cipher_key"), _bytes(record, "mask_key"), _bytes(record, "self_mask_seed"),
            _bytes(record, "share_randomness"),
        ),
        encoded_input=np.asarray(encoded["x"].numpy()),
        # the roster's versions were checked against the session's when the keys were shared
        roster={u: AdvertisedKeys(u, c, m, session.params.protocol_version) for u, c, m in zip(roster, ciphers, masks)},
        own_share=Share(_int(record, "own_share_x"), share_data) if share_data else None,
        inbox=dict(zip(inbox, _bytes_list(record, "inbox_ciphertexts"))),
        revealed=dict(zip(revealed, _strs(record, "revealed_kinds"))),
        masked_sent=bool(record["masked_sent"]),
    )
    return session, state


def client_state_of(state: RecordDict) -> dict[str, np.ndarray]:
    """The strategy's state of the node's client, as the node kept it (empty: none yet)."""
    record = state.array_records.get(CLIENT_STATE)
    return {} if record is None else {key: np.asarray(array.numpy()) for key, array in record.items()}


def record_client_state(state: RecordDict, values: dict[str, np.ndarray]) -> None:
    """Keep the client's state on the node for its next message (never sent)."""
    state[CLIENT_STATE] = ArrayRecord({key: Array(np.ascontiguousarray(value)) for key, value in values.items()})


def derived_blocks_of(state: RecordDict, key: dict[str, str | int]) -> dict[str, DiscreteMechanism] | None:
    """The discrete blocks this node kept for ``key`` (its plan copy's fingerprint, the run's
    mechanism, the protocol version, its gdpfed version: ``record_derived_blocks``), or ``None``
    when it kept none, kept another key's, or the record does not read back (derive them again;
    docs/flower.md §2 "The discrete mechanism and the wire version")."""
    record = state.config_records.get(DERIVED_BLOCKS)
    if record is None or any(record.get(name) != value for name, value in key.items()):
        return None
    try:
        blocks = json.loads(_str(record, "blocks"))
        return {str(pool): DiscreteMechanism.model_validate(block) for pool, block in blocks.items()}
    except (ProtocolError, ValueError, AttributeError):  # ValueError: JSON's and pydantic's
        return None


def checked_blocks_of(state: RecordDict, key: dict[str, str | int]) -> frozenset[str]:
    """The pools whose stated block (an earlier calibration's) this node's check accepted at its
    own noise for ``key``, kept with the derived blocks (``record_derived_blocks``); empty when
    it kept none for ``key`` or the record does not read back (check them again)."""
    record = state.config_records.get(DERIVED_BLOCKS)
    if record is None or any(record.get(name) != value for name, value in key.items()):
        return frozenset()
    try:
        pools = json.loads(_str(record, "checked")) if "checked" in record else []
    except (ProtocolError, ValueError):
        return frozenset()
    if not isinstance(pools, list) or not all(isinstance(pool, str) for pool in pools):
        return frozenset()
    return frozenset(pools)


def record_derived_blocks(state: RecordDict, key: dict[str, str | int], blocks: Mapping[str, DiscreteMechanism],
                          checked: Collection[str] = ()) -> None:
    """Keep the blocks this node derived from its plan copy, under ``key``, for its next
    messages, with ``checked``, the pools whose stated block its check accepted at its own
    noise (``checked_blocks_of``; one entry: another plan's replaces it; never sent)."""
    encoded = json.dumps({pool: block.model_dump(mode="json") for pool, block in blocks.items()})
    state[DERIVED_BLOCKS] = ConfigRecord({**key, "blocks": encoded, "checked": json.dumps(sorted(checked))})


# ---- PERSONAL


def personal_request(plan_fingerprint: str, global_round: int, global_params: np.ndarray) -> RecordDict:
    return RecordDict({
        SESSION: ConfigRecord({"plan_fingerprint": plan_fingerprint, "global_round": global_round}),
        GLOBAL: ArrayRecord({"params": Array(np.ascontiguousarray(global_params))}),
    })


def personal_request_of(content: RecordDict) -> tuple[str, int]:
    record = content.config_records[SESSION]
    return _str(record, "plan_fingerprint"), _int(record, "global_round")


def personal_reply(scores: tuple[float, int, int] | None) -> RecordDict:
    if scores is None:
        return RecordDict({REPLY: ConfigRecord({"scored": False})})
    loss_sum, correct, count = scores
    return RecordDict({REPLY: ConfigRecord({"scored": True, "loss_sum": loss_sum, "correct": correct, "count": count})})


def personal_from_reply(content: RecordDict) -> tuple[float, int, int] | None:
    record = content.config_records[REPLY]
    if not record.get("scored", False):
        return None
    loss_sum, correct, count = _float(record, "loss_sum"), _int(record, "correct"), _int(record, "count")
    if not 0 <= correct <= count:
        raise ProtocolError(f"the node scored {correct} of {count} test rows correct")
    return loss_sum, correct, count


def last_joined_round(state: RecordDict) -> int | None:
    record = state.config_records.get(JOINED)
    return None if record is None else _int(record, "last_round")


def record_joined_round(state: RecordDict, global_round: int) -> None:
    state[JOINED] = ConfigRecord({"last_round": global_round})


# Typed reads of a record's fields: a field of the wrong type is a protocol violation.


def _field(record: ConfigRecord, key: str) -> object:
    try:
        return record[key]
    except KeyError:
        raise ProtocolError(f"the record lacks the field {key!r}") from None


def _int(record: ConfigRecord, key: str) -> int:
    value = _field(record, key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(f"record field {key!r} is not an integer")
    return value


def _float(record: ConfigRecord, key: str) -> float:
    value = _field(record, key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProtocolError(f"record field {key!r} is not a number")
    return float(value)


def _str(record: ConfigRecord, key: str) -> str:
    value = _field(record, key)
    if not isinstance(value, str):
        raise ProtocolError(f"record field {key!r} is not a string")
    return value


def _bytes(record: ConfigRecord, key: str) -> bytes:
    value = _field(record, key)
    if not isinstance(value, bytes):
        raise ProtocolError(f"record field {key!r} is not bytes")
    return value


def _items(record: ConfigRecord, key: str, kind: type | tuple[type, ...]) -> list[Any]:
    value = _field(record, key)
    if not isinstance(value, list) or any(isinstance(x, bool) or not isinstance(x, kind) for x in value):
        raise ProtocolError(f"record field {key!r} is not a list of {getattr(kind, '__name__', kind)}")
    return value


def _ints(record: ConfigRecord, key: str) -> list[int]:
    return _items(record, key, int)


def _strs(record: ConfigRecord, key: str) -> list[str]:
    return _items(record, key, str)


def _bytes_list(record: ConfigRecord, key: str) -> list[bytes]:
    return _items(record, key, bytes)
