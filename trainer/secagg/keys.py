"""Key material of the protocol: simulated client randomness, X25519 agreement, HKDF, AEAD.

``docs/secure-aggregation.md``, "Key derivations". Every secret a party draws in the
simulation comes from ``derive_bytes(seed, party, purpose)`` (HKDF-SHA256 of the run seed,
the party and the purpose), so a run reproduces from its seed; a deployment draws the same
values from ``os.urandom`` / ``X25519PrivateKey.generate()`` instead, and nothing else in
the protocol changes.
"""

from __future__ import annotations

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from accounting.errors import InvalidInputError

KEY_BYTES = 32
_SIMULATION_SALT = b"gdpfed-secagg-simulation-v1"
CHANNEL_INFO = b"gdpfed-secagg channel key v1"
PAIRWISE_MASK_INFO = b"gdpfed-secagg pairwise mask key v1"


def derive_bytes(seed: int, party: str, purpose: str, length: int = KEY_BYTES) -> bytes:
    """HKDF-SHA256(ikm = seed, salt = fixed, info = party | purpose): the simulation's randomness.

    Distinct (party, purpose) pairs give independent-looking outputs; the same triple always
    gives the same bytes. Stands in for ``os.urandom(length)`` of a deployment.
    """
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise InvalidInputError("seed", f"must be a non-negative integer, got {seed!r}")
    ikm = seed.to_bytes(max(1, (seed.bit_length() + 7) // 8), "big")
    info = f"{party}|{purpose}".encode()
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=_SIMULATION_SALT, info=info).derive(ikm)


def private_key_from_bytes(raw: bytes) -> X25519PrivateKey:
    """An X25519 private key from 32 bytes (RFC 7748 clamps them; any 32 bytes are valid)."""
    return X25519PrivateKey.from_private_bytes(raw)


def private_key_bytes(key: X25519PrivateKey) -> bytes:
    return key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())


def public_key_bytes(key: X25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def agreed_key(
    private_key: X25519PrivateKey, peer_public: X25519PublicKey | bytes, session_id: bytes, info: bytes
) -> bytes:
    """HKDF-SHA256(X25519(sk, pk_peer), salt = session id, info = purpose): 32 symmetric bytes.

    X25519 is symmetric, so both ends of a pair derive the same key; the session id binds
    it to this aggregation and ``info`` separates the channel key from the mask key.
    """
    if not isinstance(peer_public, X25519PublicKey):
        peer_public = X25519PublicKey.from_public_bytes(peer_public)
    shared = private_key.exchange(peer_public)
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=session_id, info=info).derive(shared)


def channel_nonce(sender: int, recipient: int) -> bytes:
    """96-bit AEAD nonce (sender, recipient): the two directions of one channel key never share a nonce."""
    return sender.to_bytes(6, "big") + recipient.to_bytes(6, "big")


def associated_data(session_id: bytes, sender: int, recipient: int) -> bytes:
    return session_id + sender.to_bytes(8, "big") + recipient.to_bytes(8, "big")


def channel_cipher(key: bytes) -> ChaCha20Poly1305:
    """The AEAD of one channel key (made once per peer: both directions use the same key)."""
    return ChaCha20Poly1305(key)


def seal(channel: ChaCha20Poly1305, session_id: bytes, sender: int, recipient: int, plaintext: bytes) -> bytes:
    """ChaCha20-Poly1305 encryption of a share for ``recipient``, bound to session and routing."""
    return channel.encrypt(
        channel_nonce(sender, recipient), plaintext, associated_data(session_id, sender, recipient)
    )


def open_sealed(
    channel: ChaCha20Poly1305, session_id: bytes, sender: int, recipient: int, ciphertext: bytes
) -> bytes:
    """Decrypt and authenticate; ``cryptography.exceptions.InvalidTag`` if anything was altered."""
    return channel.decrypt(
        channel_nonce(sender, recipient), ciphertext, associated_data(session_id, sender, recipient)
    )


def rounding_rng(seed: int, client_id: int) -> np.random.Generator:
    """The client's generator for randomised rounding (not a secret; seeded per client from the run seed)."""
    material = derive_bytes(seed, f"client:{client_id}", "rounding", 16)
    return np.random.Generator(np.random.PCG64(int.from_bytes(material, "big")))
