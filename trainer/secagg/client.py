"""One client of a secure-aggregation session (Bonawitz et al. 2017, honest-but-curious variant).

``docs/secure-aggregation.md``, "Protocol rounds". The client holds its encoded input and
its secrets; it hands the server only ``messages`` objects and checks every request of the
server before answering it, refusing (``ProtocolError``) whatever could unmask an input.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from trainer.secagg import keys, shamir
from trainer.secagg.encoding import check_residues, encode, modulus_mask, word_dtype
from trainer.secagg.errors import ProtocolError
from trainer.secagg.graph import share_group
from trainer.secagg.messages import (
    AdvertisedKeys,
    EncryptedShare,
    MaskedInput,
    SessionSetup,
    UnmaskingShares,
    version_mismatch,
)
from trainer.secagg.params import SecAggParams
from trainer.secagg.prg import add_masks

SECRET_BYTES = keys.KEY_BYTES
# A share carries 16 limbs of b_u then 16 limbs of s_u^SK, 4 bytes each.
_HALF_SHARE_BYTES = (SECRET_BYTES // shamir.LIMB_BYTES) * 4


@dataclass(frozen=True)
class ClientSecrets:
    """Client u's secrets: c_u^SK, s_u^SK (raw X25519 private keys), b_u, and its Shamir randomness.

    ``derive`` is the simulation's (from the run seed, so a run reproduces); ``generate``
    is a deployment's (``os.urandom``; any 32 bytes are a valid X25519 key after RFC 7748
    clamping). ``docs/secure-aggregation.md``, "Key derivations".
    """

    cipher_key: bytes
    mask_key: bytes
    self_mask_seed: bytes
    share_randomness: bytes

    @classmethod
    def derive(cls, seed: int, client_id: int) -> ClientSecrets:
        party = f"client:{client_id}"
        return cls(
            cipher_key=keys.derive_bytes(seed, party, "cipher-key"),
            mask_key=keys.derive_bytes(seed, party, "mask-key"),
            self_mask_seed=keys.derive_bytes(seed, party, "self-mask-seed"),
            share_randomness=keys.derive_bytes(seed, party, "shamir-coefficients"),
        )

    @classmethod
    def generate(cls) -> ClientSecrets:
        return cls(*(os.urandom(SECRET_BYTES) for _ in range(4)))


@dataclass
class ClientState:
    """Everything a client holds between protocol rounds, as bytes and arrays.

    A deployment where each protocol round runs in a fresh process (Flower starts one per
    message) stores it locally between rounds (``Client.state``, ``Client.restore``); it
    holds the client's secrets and must never be sent to the server.
    """

    client_id: int
    secrets: ClientSecrets
    encoded_input: np.ndarray
    roster: dict[int, AdvertisedKeys] = field(default_factory=dict)
    own_share: shamir.Share | None = None
    inbox: dict[int, bytes] = field(default_factory=dict)
    revealed: dict[int, str] = field(default_factory=dict)
    masked_sent: bool = False


def encode_input(
    vector: np.ndarray,
    params: SecAggParams,
    rng: np.random.Generator | Callable[[], np.random.Generator],
    field: str,
) -> np.ndarray:
    """What client u adds masks to: its vector in Z_(2^b), by the session's ``params.encoding``.

    ``fixed_point``: randomised-rounding fixed point at ``params.scale`` (``encoding.encode``);
    ``residues``: the vector is already integers mod 2^b (``encoding.check_residues``), used
    as it is. Shared by the clients, ``plain_sum`` and the exact-sum simulation.
    """
    if params.encoding == "residues":
        return check_residues(vector, params.modulus_bits, field=field)
    return encode(
        vector,
        scale=params.scale,
        modulus_bits=params.modulus_bits,
        value_bound=params.value_bound,
        rng=rng,
        field=field,
    )


def _fresh_rng() -> np.random.Generator:
    """A deployment client's rounding randomness (os.urandom)."""
    return np.random.Generator(np.random.PCG64(int.from_bytes(os.urandom(16), "big")))


class Client:
    """Client u: keys (c_u, s_u), self-mask seed b_u, and its encoded input x_u in Z_(2^b)^d."""

    def __init__(
        self,
        client_id: int,
        vector: np.ndarray,
        params: SecAggParams,
        setup: SessionSetup,
        seed: int | None,
        *,
        secrets: ClientSecrets | None = None,
    ) -> None:
        """``seed``: the simulation's run seed (secrets and rounding derived from it, so a run
        reproduces); ``None`` in a deployment, where the secrets are ``secrets`` or freshly
        generated and the rounding randomness comes from ``os.urandom``."""
        if client_id not in setup.graph:
            raise ProtocolError(f"client {client_id} is not a participant of this session")
        if secrets is None:
            secrets = ClientSecrets.generate() if seed is None else ClientSecrets.derive(seed, client_id)
        # Made only if the vector needs rounding (the round engine's never do).
        rng: Callable[[], np.random.Generator] = (
            _fresh_rng if seed is None else partial(keys.rounding_rng, seed, client_id)
        )
        encoded = encode_input(vector, params, rng, f"vectors[{client_id}]")
        self._load(params, setup, ClientState(client_id, secrets, encoded))

    @classmethod
    def restore(cls, params: SecAggParams, setup: SessionSetup, state: ClientState) -> Client:
        """The client that ``state`` (from ``Client.state``) describes, in the same session."""
        if state.client_id not in setup.graph:
            raise ProtocolError(f"client {state.client_id} is not a participant of this session")
        if state.encoded_input.dtype != word_dtype(params.modulus_bits) or state.encoded_input.ndim != 1:
            raise ProtocolError("the stored input does not match the session's modulus")
        client = cls.__new__(cls)
        client._load(params, setup, state)
        return client

    def _load(self, params: SecAggParams, setup: SessionSetup, state: ClientState) -> None:
        self.client_id = state.client_id
        self._params = params
        self._setup = setup
        self._secrets = state.secrets
        self._cipher_key = keys.private_key_from_bytes(state.secrets.cipher_key)
        self._mask_key = keys.private_key_from_bytes(state.secrets.mask_key)
        self._self_mask_seed = state.secrets.self_mask_seed
        self._share_randomness = state.secrets.share_randomness
        self._input = state.encoded_input
        self._group = share_group(state.client_id, setup.graph)
        self._neighbours = frozenset(setup.graph[state.client_id])
        self._roster: dict[int, AdvertisedKeys] = dict(state.roster)
        self._channels: dict[int, ChaCha20Poly1305] = {}
        self._own_share: shamir.Share | None = state.own_share
        self._inbox: dict[int, bytes] = dict(state.inbox)
        self._revealed: dict[int, str] = dict(state.revealed)
        self._masked_sent = state.masked_sent

    def state(self) -> ClientState:
        """What ``restore`` needs to continue this client in a later process (secrets included)."""
        return ClientState(
            client_id=self.client_id,
            secrets=self._secrets,
            encoded_input=self._input,
            roster=dict(self._roster),
            own_share=self._own_share,
            inbox=dict(self._inbox),
            revealed=dict(self._revealed),
            masked_sent=self._masked_sent,
        )

    @property
    def dimension(self) -> int:
        return int(self._input.shape[0])

    # Round 0: AdvertiseKeys.
    def advertise_keys(self) -> AdvertisedKeys:
        return AdvertisedKeys(
            sender=self.client_id,
            cipher_public_key=keys.public_key_bytes(self._cipher_key),
            mask_public_key=keys.public_key_bytes(self._mask_key),
            protocol_version=self._params.protocol_version,
        )

    # Round 1: ShareKeys.
    def share_keys(self, roster: Mapping[int, AdvertisedKeys]) -> list[EncryptedShare]:
        """t_G-of-|G| shares of b_u || s_u^SK for the share group G, each sealed for its holder.

        Holder v (at x = index in G + 1) gets AEAD_k(share) with k = HKDF(X25519(c_u^SK, c_v^PK)).
        """
        if self._own_share is not None:
            raise ProtocolError("keys were already shared in this session")
        if self.client_id not in roster:
            raise ProtocolError("the roster omits this client's own keys")
        if len(roster) < self._params.threshold:
            raise ProtocolError(f"only {len(roster)} clients advertised keys, fewer than the threshold")
        for peer, advertised in sorted(roster.items()):
            # a peer on another version would expand other masks: refuse before sharing a secret
            if advertised.protocol_version != self._params.protocol_version:
                raise ProtocolError(
                    version_mismatch(f"client {peer}", advertised.protocol_version, self._params.protocol_version)
                )
        self._roster = dict(roster)
        threshold = self._params.group_threshold(len(self._group), len(self._setup.participants))
        secret = self._self_mask_seed + keys.private_key_bytes(self._mask_key)
        shares = shamir.split(secret, threshold, range(1, len(self._group) + 1), self._share_randomness)
        messages = []
        for holder, share in zip(self._group, shares):
            if holder == self.client_id:
                self._own_share = share
            elif holder in roster:
                plaintext = share.x.to_bytes(4, "big") + share.data
                channel = self._channel(holder)
                ciphertext = keys.seal(channel, self._setup.session_id, self.client_id, holder, plaintext)
                messages.append(EncryptedShare(self.client_id, holder, ciphertext))
        return messages

    # Round 2: MaskedInputCollection.
    def masked_input(self, inbox: Sequence[EncryptedShare], *, out: np.ndarray | None = None) -> MaskedInput:
        """y_u = x_u + PRG(b_u) + sum_(v in P, v > u) PRG(s_uv) - sum_(v in P, v < u) PRG(s_uv) mod 2^b.

        P = the neighbours whose shares reached u (they are in U2), s_uv = HKDF(X25519(s_u^SK, s_v^PK)).
        ``out`` (a writable vector of the input's dtype and length) receives y_u instead of a
        new array, e.g. shared memory the server reads (``trainer.secagg.parallel``).
        """
        if self._masked_sent:
            # A second y_u with another peer set would differ from the first by known masks.
            raise ProtocolError("the masked input was already sent in this session")
        for message in inbox:
            if message.recipient != self.client_id or message.sender not in self._neighbours:
                raise ProtocolError(f"share from {message.sender} to {message.recipient} misrouted")
            if message.sender in self._inbox:
                raise ProtocolError(f"two shares from client {message.sender}")
            self._inbox[message.sender] = message.ciphertext
        if self._own_share is None:
            raise ProtocolError("masking requested before ShareKeys")
        bits = self._params.modulus_bits
        if out is None:
            masked = self._input.copy()
        else:
            if out.dtype != self._input.dtype or out.shape != self._input.shape:
                raise ValueError(f"out must be {self._input.dtype} of shape {self._input.shape}")
            out[...] = self._input
            masked = out
        pairwise = ((self._pairwise_key(peer), 1 if peer > self.client_id else -1) for peer in sorted(self._inbox))
        add_masks(masked, [(self._self_mask_seed, 1), *pairwise], self._params.protocol_version)
        if bits not in (32, 64):
            masked &= word_dtype(bits).type(modulus_mask(bits))
        masked.setflags(write=False)
        self._masked_sent = True
        return MaskedInput(sender=self.client_id, masked=masked)

    # Round 3: Unmasking.
    def unmask(self, survivors: Sequence[int]) -> UnmaskingShares:
        """For each group member v whose shares u holds: share of b_v if v survived, of s_v^SK if not.

        Refuses when the request could unmask an input: this client listed as dropped after it
        sent y_u, fewer survivors than the threshold, a survivor that never shared keys, a
        disconnected survivor graph (sparse mode), or a reveal that contradicts an earlier one.
        """
        survivor_set = set(survivors)
        if not self._masked_sent:
            raise ProtocolError("unmasking requested before this client sent its masked input")
        if self.client_id not in survivor_set:
            raise ProtocolError("the server lists this client as dropped although it sent its masked input")
        if len(survivor_set) < self._params.threshold:
            raise ProtocolError(f"{len(survivor_set)} survivors, fewer than the threshold {self._params.threshold}")
        if not survivor_set <= set(self._roster):
            raise ProtocolError("survivors include clients that never advertised keys")
        unknown = (survivor_set & self._neighbours) - set(self._inbox)
        if unknown:
            raise ProtocolError(f"survivors {sorted(unknown)} never shared keys with this client")
        if not self._setup.connected(survivor_set):
            raise ProtocolError("the survivors' masking graph is disconnected; a partial sum would leak")
        if self._own_share is None:
            raise ProtocolError("unmasking requested before ShareKeys")
        holdings = {self.client_id: self._own_share, **{v: self._open(v) for v in self._inbox}}
        self_mask_shares: dict[int, shamir.Share] = {}
        mask_key_shares: dict[int, shamir.Share] = {}
        for owner, share in sorted(holdings.items()):
            kind = "self_mask" if owner in survivor_set else "mask_key"
            if self._revealed.setdefault(owner, kind) != kind:
                raise ProtocolError(f"the server asks for both secrets of client {owner}")
            if kind == "self_mask":
                self_mask_shares[owner] = shamir.Share(share.x, share.data[:_HALF_SHARE_BYTES])
            else:
                mask_key_shares[owner] = shamir.Share(share.x, share.data[_HALF_SHARE_BYTES:])
        return UnmaskingShares(self.client_id, self_mask_shares, mask_key_shares)

    def _channel(self, peer: int) -> ChaCha20Poly1305:
        """The AEAD under HKDF(X25519(c_u^SK, c_v^PK)), agreed once per peer (sealing and opening)."""
        if peer not in self._channels:
            self._channels[peer] = keys.channel_cipher(keys.agreed_key(
                self._cipher_key, self._roster[peer].public_key("cipher"), self._setup.session_id, keys.CHANNEL_INFO
            ))
        return self._channels[peer]

    def _pairwise_key(self, peer: int) -> bytes:
        return keys.agreed_key(
            self._mask_key, self._roster[peer].public_key("mask"), self._setup.session_id, keys.PAIRWISE_MASK_INFO
        )

    def _open(self, sender: int) -> shamir.Share:
        plaintext = keys.open_sealed(
            self._channel(sender), self._setup.session_id, sender, self.client_id, self._inbox[sender]
        )
        return shamir.Share(int.from_bytes(plaintext[:4], "big"), plaintext[4:])
