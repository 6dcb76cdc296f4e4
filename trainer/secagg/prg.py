"""The mask generator: a keystream read as d unsigned words mod 2^b, by protocol version.

``docs/secure-aggregation.md``, "Masking arithmetic" and "Protocol versions". PRG(key) is
the keystream under ``key`` (the encryption of zeros) of the session's protocol version:
version 1 ChaCha20 (the 32-byte key, nonce 0), version 2 AES-128-CTR (the key's first 16
bytes, counter block 0; the PRG of Google's reference SecAgg, faster where the CPU has
AES instructions). The words are read little-endian as uint32 or uint64 and reduced mod
2^b by masking the low b bits. Uniform bytes give uniform words mod 2^b since 2^b divides
2^32 or 2^64. Each key expands exactly one mask, so a fixed nonce is safe; distinct
nonces still separate the uses of one key (self mask vs. Shamir coefficients, which stay
ChaCha20 in both versions).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from trainer.secagg.encoding import modulus_mask, word_dtype

# cryptography's ChaCha20 nonce is 16 bytes: a 32-bit little-endian block counter, then 96 bits.
MASK_NONCE = bytes(16)
# AES-CTR's initial counter block (16 bytes, the counter in its low end); a key's first 16
# bytes are a uniform AES-128 key, as every mask key is 32 uniform bytes (keys.KEY_BYTES).
AES_COUNTER_BLOCK = bytes(16)
AES_KEY_BYTES = 16
# The protocol versions and their mask generators (docs/secure-aggregation.md §Protocol versions).
PRG_OF_VERSION = {1: "chacha20", 2: "aes-128-ctr"}
LATEST_PROTOCOL_VERSION = 2
# What a session or a message that states no version speaks: the version every party spoke
# before versions existed, and what a Flower record that states none is read as.
DEFAULT_PROTOCOL_VERSION = 1
FIELD_NONCE = bytes(4) + b"shamir-coefs"


def keystream(key: bytes, num_bytes: int, nonce: bytes = MASK_NONCE) -> bytearray:
    """``num_bytes`` of the ChaCha20 keystream under ``key`` and ``nonce``."""
    out = bytearray(num_bytes)
    encryptor = Cipher(algorithms.ChaCha20(key, nonce), mode=None).encryptor()
    # Encrypting zeros yields the keystream; update_into avoids one more copy of d words.
    encryptor.update_into(bytes(num_bytes), out)
    return out


def mask_cipher(key: bytes, version: int) -> Any:
    """A fresh encryptor of the mask generator of protocol ``version`` under ``key``."""
    if version == 1:
        return Cipher(algorithms.ChaCha20(key, MASK_NONCE), mode=None).encryptor()
    if version == 2:
        return Cipher(algorithms.AES(key[:AES_KEY_BYTES]), modes.CTR(AES_COUNTER_BLOCK)).encryptor()
    raise ValueError(f"unknown secure-aggregation protocol version {version!r}")


def expand_mask(key: bytes, length: int, modulus_bits: int, version: int = DEFAULT_PROTOCOL_VERSION) -> np.ndarray:
    """PRG(key): ``length`` words, uniform in [0, 2^modulus_bits), of ``word_dtype(modulus_bits)``."""
    dtype = word_dtype(modulus_bits).newbyteorder("<")
    stream = bytearray(length * dtype.itemsize)
    mask_cipher(key, version).update_into(bytes(len(stream)), stream)
    words = np.frombuffer(stream, dtype=dtype)
    words = words.astype(word_dtype(modulus_bits), copy=False)
    if modulus_bits not in (32, 64):
        words = words & words.dtype.type(modulus_mask(modulus_bits))
    return words


def add_masks(total: np.ndarray, masks: Iterable[tuple[bytes, int]], version: int = DEFAULT_PROTOCOL_VERSION) -> int:
    """``total += sum_i sign_i PRG(key_i)`` in place, wrapping in ``total``'s unsigned words.

    ``masks`` yields (key, +1 or -1); PRG is protocol ``version``'s generator (1: ChaCha20,
    2: AES-128-CTR). Each mask is one cipher call over the whole vector
    into one reused buffer (the encryption of a reused zero buffer), then one in-place
    wraparound add or subtract: no per-mask allocation, no Python loop over coordinates.
    The words are not reduced mod 2^b: the caller ANDs once at the end (2^b divides the
    word range, so the result mod 2^b is the same). Returns the keystream bytes generated.
    (``docs/secure-aggregation.md``, "Masking arithmetic".)
    """
    if total.dtype not in (np.dtype(np.uint32), np.dtype(np.uint64)) or total.ndim != 1:
        raise ValueError(f"masks are added to a 1-D uint32 or uint64 vector, got {total.dtype} {total.shape}")
    scratch = np.empty_like(total)
    out = scratch.data.cast("B")
    zeros = bytes(len(out))
    generated = 0
    for key, sign in masks:
        mask_cipher(key, version).update_into(zeros, out)
        if sys.byteorder != "little":  # the keystream is read as little-endian words
            scratch.byteswap(inplace=True)
        if sign > 0:
            np.add(total, scratch, out=total)
        else:
            np.subtract(total, scratch, out=total)
        generated += len(out)
    return generated


def uniform_below(key: bytes, count: int, modulus: int, nonce: bytes = FIELD_NONCE) -> np.ndarray:
    """``count`` values in [0, modulus) for modulus < 2^32, as uint64 (64-bit words mod modulus).

    The bias of reducing a uniform 64-bit word is below modulus / 2^64 < 2^-32 per value.
    """
    words = np.frombuffer(keystream(key, count * 8, nonce), dtype="<u8").astype(np.uint64)
    return words % np.uint64(modulus)
