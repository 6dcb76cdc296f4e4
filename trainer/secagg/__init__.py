"""Secure aggregation for the trainer: Bonawitz et al. (CCS 2017) with SecAgg+ as the sparse option.

numpy and ``cryptography`` (X25519, HKDF, ChaCha20, AES-128-CTR, ChaCha20-Poly1305) only; no torch, so
the round engine hands it numpy vectors its clients have already clipped and noised.
The protocol, the threat model and the math are in ``docs/secure-aggregation.md``.

Public API::

    params = choose_params(num_clients, threshold, value_bound, scale=None, mode="full")
    result = secure_sum({client_id: vector, ...}, params, seed=seed,
                        drop_before_masking=(), drop_before_unmasking=())
    result.sum  # float64 sum of the survivors' inputs, or None when result.aborted
    secure_sum(..., workers=4)  # the clients in 4 processes; the same result bit for bit
    exact_sum(...)  # the same result without the cryptography (experiments on learning)
"""

from trainer.secagg.client import Client, ClientSecrets, ClientState
from trainer.secagg.encoding import decode_sum, encode, required_modulus_bits
from trainer.secagg.errors import ProtocolError
from trainer.secagg.params import SecAggParams, choose_params
from trainer.secagg.protocol import SecAggResult, new_session, plain_sum, secure_sum
from trainer.secagg.server import Server
from trainer.secagg.simulation import exact_sum

__all__ = [
    "Client",
    "ClientSecrets",
    "ClientState",
    "ProtocolError",
    "SecAggParams",
    "SecAggResult",
    "Server",
    "choose_params",
    "decode_sum",
    "encode",
    "exact_sum",
    "new_session",
    "plain_sum",
    "required_modulus_bits",
    "secure_sum",
]
