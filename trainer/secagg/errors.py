"""Errors of the secure-aggregation protocol that are not user input errors.

Bad inputs (a value beyond the declared bound, a threshold out of range, a modulus wider
than 64 bits) raise ``accounting.errors.InvalidInputError`` like everywhere else. The
errors here mean that a party deviated from the protocol (``docs/secure-aggregation.md``,
"Threat model"): an honest client refuses to continue rather than leak.
"""

from __future__ import annotations


class ProtocolError(RuntimeError):
    """A message violates the protocol; the party that detects it refuses to go on.

    Examples: the server asks a client for both the self-mask share and the masking-key
    share of the same client, announces survivors it never received, or a reconstructed
    key does not match the public key its owner advertised.
    """


class SessionAborted(Exception):
    """The server stops the session without releasing anything (too few survivors).

    Internal to the package: ``secure_sum`` turns it into ``SecAggResult(aborted=True)``.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
