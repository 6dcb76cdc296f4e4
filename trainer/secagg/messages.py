"""The messages the server receives and routes: public keys, ciphertexts, masked vectors, shares.

These are the only objects that cross between clients and the server
(``docs/secure-aggregation.md``, "Protocol rounds"). None of them carries a plaintext
input: a masked vector is uniform in Z_(2^b)^d, a share of one secret is revealed only by
the rule that never gives the server both secrets of a client.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey

from trainer.secagg.graph import is_connected
from trainer.secagg.prg import DEFAULT_PROTOCOL_VERSION, PRG_OF_VERSION
from trainer.secagg.shamir import Share


@dataclass(frozen=True)
class SessionSetup:
    """Server -> all (before round 0): the public session id, the participants and the share graph."""

    session_id: bytes
    participants: tuple[int, ...]
    graph: Mapping[int, tuple[int, ...]]
    # Memo of ``connected``: every client checks the same public survivor set, so the
    # simulated parties that share this object compute it once (it is public information).
    _connectivity: dict[frozenset[int], bool] = field(default_factory=dict, compare=False, repr=False)

    def connected(self, nodes: Collection[int]) -> bool:
        """Whether the subgraph of ``graph`` induced on ``nodes`` is connected."""
        key = frozenset(nodes)
        if key not in self._connectivity:
            self._connectivity[key] = is_connected(key, self.graph)
        return self._connectivity[key]


@dataclass(frozen=True)
class AdvertisedKeys:
    """Round 0, client -> server: the raw X25519 public keys c_u^PK (share encryption) and s_u^PK (masks)."""

    sender: int
    cipher_public_key: bytes
    mask_public_key: bytes
    # The protocol version the client speaks (docs/secure-aggregation.md §Protocol versions).
    # Version 1 clients sent no version, so a message without one reads as 1.
    protocol_version: int = DEFAULT_PROTOCOL_VERSION
    # Memo of ``public_key``: the simulated clients of one process share the broadcast
    # roster, so each public key is parsed once, not once per neighbour (public data).
    _parsed: dict[str, X25519PublicKey] = field(default_factory=dict, compare=False, repr=False)

    def public_key(self, which: Literal["cipher", "mask"]) -> X25519PublicKey:
        """The parsed c_u^PK (``"cipher"``) or s_u^PK (``"mask"``)."""
        if which not in self._parsed:
            raw = self.cipher_public_key if which == "cipher" else self.mask_public_key
            self._parsed[which] = X25519PublicKey.from_public_bytes(raw)
        return self._parsed[which]

    def __reduce__(self) -> tuple[Any, ...]:
        # The wire form: the raw keys only (a parsed key does not pickle).
        return (AdvertisedKeys, (self.sender, self.cipher_public_key, self.mask_public_key, self.protocol_version))


def version_mismatch(who: str, spoken: int, expected: int) -> str:
    """The refusal of a party that speaks another protocol version than the session's."""
    def named(version: int) -> str:
        return f"v{version} ({PRG_OF_VERSION.get(version, 'unknown')} masks)"

    return (
        f"{who} speaks secure-aggregation protocol {named(spoken)}, this session {named(expected)}: "
        "old and new clients cannot be mixed in one session (their masks would not cancel); run every "
        "party on one version"
    )


@dataclass(frozen=True)
class EncryptedShare:
    """Round 1, client -> server -> recipient: AEAD(share of b_u, share of s_u^SK); opaque to the server."""

    sender: int
    recipient: int
    ciphertext: bytes

    def __reduce__(self) -> tuple[Any, ...]:
        # A plain tuple pickles several times faster than a dataclass's state dict, and
        # ~10^4 of these cross the worker pipes each way per session (``parallel``).
        return (EncryptedShare, (self.sender, self.recipient, self.ciphertext))


@dataclass(frozen=True)
class MaskedInput:
    """Round 2, client -> server: y_u = x_u + PRG(b_u) + sum of signed pairwise masks, mod 2^b."""

    sender: int
    masked: np.ndarray


@dataclass(frozen=True)
class UnmaskingShares:
    """Round 3, client -> server: shares of b_v for surviving v, of s_v^SK for dropped v (never both)."""

    sender: int
    self_mask_shares: Mapping[int, Share]
    mask_key_shares: Mapping[int, Share]
