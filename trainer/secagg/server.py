"""The aggregation server: routes ciphertexts, sums masked vectors, unmasks with enough survivors.

``docs/secure-aggregation.md``, "Protocol rounds" and "Dropout recovery". The server is
built from the public session setup alone and receives only ``messages`` objects (it never
imports the client module): public keys, ciphertexts it cannot open, masked vectors and,
at the end, one kind of share per client. Every received message is kept in
``received`` so that tests can audit what the server saw.

The server's decisions to abort are the module functions ``require_quorum``,
``require_connected`` and ``require_shares``; the exact-sum simulation
(``trainer.secagg.simulation``) applies the same functions to the same sets, so both
abort in the same rounds with the same reason.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from trainer.secagg import keys, shamir
from trainer.secagg.encoding import decode_sum, modulus_mask, word_dtype
from trainer.secagg.errors import ProtocolError, SessionAborted
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


def require_quorum(count: int, threshold: int, what: str) -> None:
    """Abort (release nothing) when fewer than ``threshold`` clients did ``what``."""
    if count < threshold:
        raise SessionAborted(f"only {count} clients {what}, fewer than the threshold {threshold}")


def require_connected(survivors: tuple[int, ...], setup: SessionSetup) -> None:
    """Abort when the survivors' masking graph is disconnected (it would reveal each component's sum)."""
    if not setup.connected(survivors):
        raise SessionAborted("the survivors' masking graph is disconnected (sparse mode)")


def require_shares(owner: int, available: int, params: SecAggParams, setup: SessionSetup, what: str) -> int:
    """The shares needed to rebuild ``owner``'s ``what``; abort when fewer are ``available``."""
    needed = params.group_threshold(len(share_group(owner, setup.graph)), len(setup.participants))
    if available < needed:
        raise SessionAborted(f"only {available} shares of the {what} of client {owner}, {needed} needed to unmask")
    return needed


class Server:
    """Honest-but-curious server of one session; sees U1 (keys), U2 (shares), U3 (masked inputs), U5 (shares)."""

    def __init__(self, params: SecAggParams, setup: SessionSetup) -> None:
        self._params = params
        self._setup = setup
        self.received: list[object] = []
        self._roster: dict[int, AdvertisedKeys] = {}
        self._sharers: frozenset[int] = frozenset()
        self._masked_sum: np.ndarray | None = None
        self._survivors: tuple[int, ...] = ()
        self._dimension: int | None = None
        self.keystream_bytes = 0  # mask bytes expanded at unmasking (for the benchmarks)
        self._neighbours = {u: frozenset(peers) for u, peers in setup.graph.items()}

    # Round 0.
    def collect_keys(self, messages: Iterable[AdvertisedKeys]) -> dict[int, AdvertisedKeys]:
        """U1 and its public keys, broadcast to every client; aborts if |U1| < t."""
        for message in messages:
            self.received.append(message)
            if message.sender not in self._setup.graph or message.sender in self._roster:
                raise ProtocolError(f"unexpected or repeated keys from client {message.sender}")
            if message.protocol_version != self._params.protocol_version:
                raise ProtocolError(
                    version_mismatch(f"client {message.sender}", message.protocol_version, self._params.protocol_version)
                )
            self._roster[message.sender] = message
        self._require(len(self._roster), "advertised keys")
        return dict(self._roster)

    # Round 1.
    def route_shares(self, messages: Iterable[EncryptedShare]) -> dict[int, list[EncryptedShare]]:
        """Forward each ciphertext to its recipient in U2 (the clients that sent shares); aborts if |U2| < t."""
        inboxes: dict[int, list[EncryptedShare]] = {}
        for message in messages:
            self.received.append(message)
            if message.sender not in self._roster or message.recipient not in self._neighbours[message.sender]:
                raise ProtocolError(f"share from {message.sender} to {message.recipient} is not on the graph")
            inboxes.setdefault(message.recipient, []).append(message)
        self._sharers = frozenset({m.sender for box in inboxes.values() for m in box})
        # A client whose group is itself only (n = 1) shares nothing but still takes part.
        self._sharers |= {u for u in self._roster if not self._setup.graph[u]}
        self._require(len(self._sharers), "shared keys")
        return {u: inboxes.get(u, []) for u in sorted(self._sharers)}

    # Round 2.
    def collect_masked_inputs(self, messages: Iterable[MaskedInput]) -> tuple[int, ...]:
        """Sum the y_u of U3 mod 2^b and announce U3.

        Aborts (nothing released) if |U3| < t, or if U3 is disconnected in the share graph.
        """
        bits = self._params.modulus_bits
        senders: set[int] = set()
        for message in messages:
            self.received.append(message)
            if message.sender not in self._sharers or message.sender in senders:
                raise ProtocolError(f"unexpected or repeated masked input from client {message.sender}")
            masked = message.masked
            if masked.dtype != word_dtype(bits) or masked.ndim != 1:
                raise ProtocolError(f"masked input of client {message.sender} has the wrong type")
            if self._masked_sum is None:
                self._dimension = int(masked.shape[0])
                self._masked_sum = np.zeros(masked.shape[0], dtype=word_dtype(bits))
            if masked.shape[0] != self._dimension:
                raise ProtocolError(f"masked input of client {message.sender} has the wrong length")
            self._masked_sum += masked
            senders.add(message.sender)
        self._survivors = tuple(sorted(senders))
        self._require(len(self._survivors), "sent masked inputs")
        require_connected(self._survivors, self._setup)
        return self._survivors

    # Round 3.
    def unmask(self, responses: Iterable[UnmaskingShares]) -> np.ndarray:
        """sum_(u in U3) x_u = sum y_u - sum_(u in U3) PRG(b_u) - sum_(u in U3, v dropped) sign * PRG(s_uv).

        b_u (u in U3) and s_v^SK (v in U2 \\ U3) come from t_G shares each, taken from the
        responders U5 in the owner's share group; aborts when some owner lacks them.
        Returns the decoded float64 sum, or for a session of ``residues`` the sum mod 2^b as
        words (its caller decodes it).
        """
        survivors = set(self._survivors)
        self_mask_shares: dict[int, dict[int, shamir.Share]] = {}
        mask_key_shares: dict[int, dict[int, shamir.Share]] = {}
        responders: set[int] = set()
        for response in responses:
            self.received.append(response)
            if response.sender not in survivors or response.sender in responders:
                raise ProtocolError(f"unexpected or repeated unmasking shares from client {response.sender}")
            if set(response.self_mask_shares) & set(response.mask_key_shares):
                raise ProtocolError(f"client {response.sender} revealed both secrets of one client")
            if not set(response.self_mask_shares) <= survivors or set(response.mask_key_shares) & survivors:
                raise ProtocolError(f"client {response.sender} revealed the wrong secret of a client")
            responders.add(response.sender)
            for owner, share in response.self_mask_shares.items():
                self_mask_shares.setdefault(owner, {})[response.sender] = share
            for owner, share in response.mask_key_shares.items():
                mask_key_shares.setdefault(owner, {})[response.sender] = share
        self._require(len(responders), "answered the unmasking request")
        if self._masked_sum is None or self._dimension is None:
            raise ProtocolError("unmasking requested before any masked input")
        bits = self._params.modulus_bits
        total = self._masked_sum.copy()
        removals: list[tuple[bytes, int]] = []
        for owner in self._survivors:
            seed = self._reconstruct(owner, self_mask_shares.get(owner, {}), "self-mask seed")
            removals.append((seed, -1))
        for dropped in sorted(self._sharers - survivors):
            raw = self._reconstruct(dropped, mask_key_shares.get(dropped, {}), "masking key")
            mask_key = keys.private_key_from_bytes(raw)
            if keys.public_key_bytes(mask_key) != self._roster[dropped].mask_public_key:
                raise ProtocolError(f"reconstructed masking key of client {dropped} does not match its public key")
            for peer in sorted(set(self._setup.graph[dropped]) & survivors):
                key = keys.agreed_key(
                    mask_key, self._roster[peer].public_key("mask"), self._setup.session_id, keys.PAIRWISE_MASK_INFO
                )
                # The survivor added +PRG(s_uv) when the dropped client's id is larger, else -PRG.
                removals.append((key, -1 if dropped > peer else 1))
        self.keystream_bytes += add_masks(total, removals, self._params.protocol_version)
        total &= word_dtype(bits).type(modulus_mask(bits))
        if self._params.encoding == "residues":
            return total
        return decode_sum(total, scale=self._params.scale, modulus_bits=bits)

    def _reconstruct(self, owner: int, shares: dict[int, shamir.Share], what: str) -> bytes:
        group = share_group(owner, self._setup.graph)
        needed = require_shares(owner, len(shares), self._params, self._setup, what)
        chosen = []
        for holder in sorted(shares)[:needed]:
            share = shares[holder]
            if share.x != group.index(holder) + 1:
                raise ProtocolError(f"client {holder} sent a share of client {owner} at the wrong point")
            chosen.append(share)
        return shamir.combine(chosen)

    def _require(self, count: int, what: str) -> None:
        require_quorum(count, self._params.threshold, what)
