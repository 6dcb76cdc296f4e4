"""API key tokens: generation, hashing and comparison (docs/service.md §Auth).

A token is ``gdpfed_`` followed by 32 random bytes (256 bits, URL-safe base64). Only its
SHA-256 is stored. A fast hash is the right tool here: slow password hashes (scrypt,
argon2) exist to make guessing low-entropy human passwords expensive, but nobody can
enumerate a 256-bit random token, and a slow hash would cost every request tens of
milliseconds. A database leak therefore reveals no usable token.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Literal

Role = Literal["planner", "operator"]
ROLES: tuple[Role, ...] = ("planner", "operator")
TOKEN_PREFIX = "gdpfed_"
# Each role may do everything the roles before it may do.
_RANK: dict[str, int] = {"planner": 1, "operator": 2}


def new_token() -> str:
    """A fresh random API token (256 bits from the OS's CSPRNG)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """Hex SHA-256 of the token's UTF-8 bytes: what the database stores."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def token_matches(token: str, stored_sha256: str) -> bool:
    """Constant-time comparison of a presented token with a stored hash."""
    return hmac.compare_digest(hash_token(token), stored_sha256)


def role_allows(role: str, required: Role) -> bool:
    """Whether a key of ``role`` may call an endpoint that requires ``required``."""
    return _RANK.get(role, 0) >= _RANK[required]
