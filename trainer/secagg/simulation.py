"""``exact_sum``: what a secure-aggregation session releases, without running its cryptography.

``docs/secure-aggregation.md`` §Exact. For experiments that study learning rather than the
protocol. The masks of a session cancel in the sum, so what the server releases is
determined by public facts alone: who took part, who dropped when, the graph, the
thresholds, and every client's own encoding of its vector. ``exact_sum`` computes exactly
that: the same validation (``InvalidInputError`` for the same vector), the same session
setup and graph (``protocol.new_session``), the same abort decisions applied to the same
sets in the same order (``server.require_quorum``, ``require_connected``,
``require_shares``), and on success the same value, the decoded sum of the survivors'
encodings mod 2^b (each client's randomised rounding from its own seed-derived
generator). No keys, shares or masks are made. ``tests/trainer/secagg/test_exact_sum.py``
checks bit-identity with ``secure_sum`` on the same seed across dropouts and every kind of
abort.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from functools import partial

import numpy as np

from trainer.secagg import keys
from trainer.secagg.encoding import check_residues, decode_sum, encode_integers, modulus_mask, to_residues, word_dtype
from trainer.secagg.errors import SessionAborted
from trainer.secagg.graph import share_group
from trainer.secagg.params import SecAggParams
from trainer.secagg.protocol import SecAggResult, check_drops, check_vectors, new_session
from trainer.secagg.server import require_connected, require_quorum, require_shares


def exact_sum(
    vectors: Mapping[int, np.ndarray],
    params: SecAggParams,
    *,
    seed: int,
    drop_before_masking: Collection[int] = (),
    drop_before_unmasking: Collection[int] = (),
) -> SecAggResult:
    """``secure_sum``'s result (sum, aborted, survivors, dropped, reason) for the same arguments.

    U1 = U2 = the participants (every client advertises keys and shares them before any
    dropout the caller names), U3 = U2 minus ``drop_before_masking``, U5 = U3 minus
    ``drop_before_unmasking``; a client's secrets are held by its share group, so the
    server can rebuild owner v's secret iff its group has enough members in U5.
    """
    ids = check_vectors(vectors, params)
    before_masking, before_unmasking = check_drops(ids, drop_before_masking, drop_before_unmasking)
    started = time.perf_counter()
    setup = new_session(ids, params, seed)
    bits = params.modulus_bits
    masked = tuple(u for u in ids if u not in before_masking)  # U3 if the session gets that far
    # Every participant encodes its vector before anything else, as each Client does on
    # construction (the same error for the same vector); U3's encodings are summed as they
    # come. sum_u (v_u mod 2^b) mod 2^b = (sum_u v_u) mod 2^b, and |every partial sum| <
    # 2^(b-1) for at most params.num_clients inputs (check_modulus): the sum is exact in
    # float64 for b <= 53, in int64 otherwise.
    exact_type = np.float64 if bits <= 53 else np.int64
    integers: np.ndarray | None = None
    in_sum = set(masked)
    for u in ids:
        if params.encoding == "residues":
            # Already mod 2^b: summed in uint64, which wraps mod 2^64, a multiple of 2^b.
            words = check_residues(vectors[u], bits, field=f"vectors[{u}]").astype(np.uint64)
            if u in in_sum:
                integers = words.copy() if integers is None else integers + words
            continue
        encoded = encode_integers(
            vectors[u], scale=params.scale, value_bound=params.value_bound,
            rng=partial(keys.rounding_rng, seed, u), field=f"vectors[{u}]",
        )
        if u in in_sum:
            if integers is None:
                integers = np.zeros(encoded.shape[0], dtype=exact_type)
            integers += encoded if exact_type is np.float64 else encoded.astype(np.int64)
    threshold = params.threshold
    survivors: tuple[int, ...] = ()
    total: np.ndarray | None = None
    reason: str | None = None
    try:
        require_quorum(len(ids), threshold, "advertised keys")
        require_quorum(len(ids), threshold, "shared keys")
        require_quorum(len(masked), threshold, "sent masked inputs")
        require_connected(masked, setup)
        survivors = masked
        responders = {u for u in survivors if u not in before_unmasking}
        require_quorum(len(responders), threshold, "answered the unmasking request")
        for owner in survivors:
            require_shares(owner, len(responders.intersection(share_group(owner, setup.graph))), params, setup,
                           "self-mask seed")
        for owner in sorted(set(ids) - set(survivors)):
            require_shares(owner, len(responders.intersection(share_group(owner, setup.graph))), params, setup,
                           "masking key")
        if integers is None:  # unreachable: survivors >= threshold >= 1
            raise RuntimeError("no survivor's encoding was summed")
        if params.encoding == "residues":
            total = (integers & np.uint64(modulus_mask(bits))).astype(word_dtype(bits))
        else:
            total = decode_sum(to_residues(integers.astype(np.int64), bits), scale=params.scale, modulus_bits=bits)
    except SessionAborted as abort:
        reason = abort.reason
    included = set(survivors)
    return SecAggResult(
        sum=total,
        aborted=total is None,
        survivors=list(survivors),
        dropped=[u for u in ids if u not in included],
        reason=reason,
        seconds={"total": time.perf_counter() - started},
    )
