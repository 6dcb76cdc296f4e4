"""One client of a secure-aggregation session (Bonawitz et al. 2017, honest-but-curious variant).

``docs/secure-aggregation.md``, "Protocol rounds". The client holds its encoded input and
its secrets; it hands the server only ``messages`` objects and checks every request of the
server before answering it, refusing (``ProtocolError``) whatever could unmask an input.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from trainer.secagg import keys, shamir
from trainer.secagg.encoding import encode, modulus_mask, word_dtype
from trainer.secagg.errors import ProtocolError
from trainer.secagg.graph import group_threshold, is_connected, share_group
from trainer.secagg.messages import AdvertisedKeys, EncryptedShare, MaskedInput, SessionSetup, UnmaskingShares
from trainer.secagg.params import SecAggParams
from trainer.secagg.prg import expand_mask

SECRET_BYTES = keys.KEY_BYTES
# A share carries 16 limbs of b_u then 16 limbs of s_u^SK, 4 bytes each.
_HALF_SHARE_BYTES = (SECRET_BYTES // shamir.LIMB_BYTES) * 4


class Client:
    """Client u: keys (c_u, s_u), self-mask seed b_u, and its encoded input x_u in Z_(2^b)^d."""

    def __init__(
        self, client_id: int, vector: np.ndarray, params: SecAggParams, setup: SessionSetup, seed: int
    ) -> None:
        if client_id not in setup.graph:
            raise ProtocolError(f"client {client_id} is not a participant of this session")
        self.client_id = client_id
        self._params = params
        self._setup = setup
        party = f"client:{client_id}"
        # Simulation: secrets from the run seed (keys.derive_bytes); a deployment uses os.urandom.
        self._cipher_key = keys.private_key_from_bytes(keys.derive_bytes(seed, party, "cipher-key"))
        self._mask_key = keys.private_key_from_bytes(keys.derive_bytes(seed, party, "mask-key"))
        self._self_mask_seed = keys.derive_bytes(seed, party, "self-mask-seed")
        self._share_randomness = keys.derive_bytes(seed, party, "shamir-coefficients")
        self._input = encode(
            vector,
            scale=params.scale,
            modulus_bits=params.modulus_bits,
            value_bound=params.value_bound,
            rng=keys.rounding_rng(seed, client_id),
            field=f"vectors[{client_id}]",
        )
        self._group = share_group(client_id, setup.graph)
        self._neighbours = frozenset(setup.graph[client_id])
        self._roster: dict[int, AdvertisedKeys] = {}
        self._channel_keys: dict[int, bytes] = {}
        self._own_share: shamir.Share | None = None
        self._inbox: dict[int, bytes] = {}
        self._revealed: dict[int, str] = {}

    @property
    def dimension(self) -> int:
        return int(self._input.shape[0])

    # Round 0: AdvertiseKeys.
    def advertise_keys(self) -> AdvertisedKeys:
        return AdvertisedKeys(
            sender=self.client_id,
            cipher_public_key=keys.public_key_bytes(self._cipher_key),
            mask_public_key=keys.public_key_bytes(self._mask_key),
        )

    # Round 1: ShareKeys.
    def share_keys(self, roster: Mapping[int, AdvertisedKeys]) -> list[EncryptedShare]:
        """t_G-of-|G| shares of b_u || s_u^SK for the share group G, each sealed for its holder.

        Holder v (at x = index in G + 1) gets AEAD_k(share) with k = HKDF(X25519(c_u^SK, c_v^PK)).
        """
        if self.client_id not in roster:
            raise ProtocolError("the roster omits this client's own keys")
        if len(roster) < self._params.threshold:
            raise ProtocolError(f"only {len(roster)} clients advertised keys, fewer than the threshold")
        self._roster = dict(roster)
        threshold = group_threshold(self._params.threshold, len(self._group), len(self._setup.participants))
        secret = self._self_mask_seed + keys.private_key_bytes(self._mask_key)
        shares = shamir.split(secret, threshold, range(1, len(self._group) + 1), self._share_randomness)
        messages = []
        for holder, share in zip(self._group, shares):
            if holder == self.client_id:
                self._own_share = share
            elif holder in roster:
                plaintext = share.x.to_bytes(4, "big") + share.data
                key = self._channel_key(holder)
                ciphertext = keys.seal(key, self._setup.session_id, self.client_id, holder, plaintext)
                messages.append(EncryptedShare(self.client_id, holder, ciphertext))
        return messages

    # Round 2: MaskedInputCollection.
    def masked_input(self, inbox: Sequence[EncryptedShare]) -> MaskedInput:
        """y_u = x_u + PRG(b_u) + sum_(v in P, v > u) PRG(s_uv) - sum_(v in P, v < u) PRG(s_uv) mod 2^b.

        P = the neighbours whose shares reached u (they are in U2), s_uv = HKDF(X25519(s_u^SK, s_v^PK)).
        """
        for message in inbox:
            if message.recipient != self.client_id or message.sender not in self._neighbours:
                raise ProtocolError(f"share from {message.sender} to {message.recipient} misrouted")
            if message.sender in self._inbox:
                raise ProtocolError(f"two shares from client {message.sender}")
            self._inbox[message.sender] = message.ciphertext
        if self._own_share is None:
            raise ProtocolError("masking requested before ShareKeys")
        bits = self._params.modulus_bits
        masked = self._input.copy()
        masked += expand_mask(self._self_mask_seed, self.dimension, bits)
        for peer in sorted(self._inbox):
            pairwise = expand_mask(self._pairwise_key(peer), self.dimension, bits)
            if peer > self.client_id:
                masked += pairwise
            else:
                masked -= pairwise
        if bits not in (32, 64):
            masked &= word_dtype(bits).type(modulus_mask(bits))
        masked.setflags(write=False)
        return MaskedInput(sender=self.client_id, masked=masked)

    # Round 3: Unmasking.
    def unmask(self, survivors: Sequence[int]) -> UnmaskingShares:
        """For each group member v whose shares u holds: share of b_v if v survived, of s_v^SK if not.

        Refuses when the request could unmask an input: this client listed as dropped after it
        sent y_u, fewer survivors than the threshold, a survivor that never shared keys, a
        disconnected survivor graph (sparse mode), or a reveal that contradicts an earlier one.
        """
        survivor_set = set(survivors)
        if self.client_id not in survivor_set:
            raise ProtocolError("the server lists this client as dropped although it sent its masked input")
        if len(survivor_set) < self._params.threshold:
            raise ProtocolError(f"{len(survivor_set)} survivors, fewer than the threshold {self._params.threshold}")
        if not survivor_set <= set(self._roster):
            raise ProtocolError("survivors include clients that never advertised keys")
        unknown = (survivor_set & self._neighbours) - set(self._inbox)
        if unknown:
            raise ProtocolError(f"survivors {sorted(unknown)} never shared keys with this client")
        if not is_connected(survivor_set, self._setup.graph):
            raise ProtocolError("the survivors' masking graph is disconnected; a partial sum would leak")
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

    def _channel_key(self, peer: int) -> bytes:
        if peer not in self._channel_keys:
            self._channel_keys[peer] = keys.agreed_key(
                self._cipher_key, self._roster[peer].cipher_public_key, self._setup.session_id, keys.CHANNEL_INFO
            )
        return self._channel_keys[peer]

    def _pairwise_key(self, peer: int) -> bytes:
        return keys.agreed_key(
            self._mask_key, self._roster[peer].mask_public_key, self._setup.session_id, keys.PAIRWISE_MASK_INFO
        )

    def _open(self, sender: int) -> shamir.Share:
        plaintext = keys.open_sealed(
            self._channel_key(sender), self._setup.session_id, sender, self.client_id, self._inbox[sender]
        )
        return shamir.Share(int.from_bytes(plaintext[:4], "big"), plaintext[4:])
