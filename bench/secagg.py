"""``gdpfed bench secagg``: secure aggregation per round vs the plain numpy sum, and Shamir vs PyCryptodome.

Table 1 runs one full session (all four rounds, every simulated client and the server in
this process) per configuration and times the plain float sum of the same vectors. The
client columns sum the work of all simulated clients; in a deployment clients run in
parallel, so ``per_client_s`` (client work / n) plus ``server_s`` approximates the
protocol's compute latency per round. A configuration whose estimated time exceeds
``SKIP_ABOVE_S`` (from the measured cost per mask word) is printed as skipped.

Table 2 times sharing and reconstructing a 32-byte secret (t-of-n) with gdpfed's numpy
Shamir over GF(2^31 - 1) and with PyCryptodome's GF(2^128) ``Shamir`` (two 16-byte halves).
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any, get_args

import numpy as np

from bench.report import median, time_calls
from planner.schema import SecaggMode

if TYPE_CHECKING:
    from trainer.secagg import SecAggResult

SKIP_ABOVE_S = 60.0
VALUE_BOUND = 1.0


def run(quick: bool) -> list[tuple[str, list[dict[str, Any]]]]:
    from trainer.secagg import choose_params

    dimensions = [10_000] if quick else [100_000, 1_000_000]
    client_counts = [10] if quick else [10, 50, 200]
    rows: list[dict[str, Any]] = []
    stage_rows: list[dict[str, Any]] = []
    seconds_per_word: float | None = None
    modes: tuple[SecaggMode, ...] = get_args(SecaggMode)
    for mode in modes:
        for dimension in dimensions:
            for num_clients in client_counts:
                threshold = math.ceil(num_clients / 2)
                params = choose_params(num_clients, threshold, VALUE_BOUND, mode=mode)
                drop_counts = [0] if quick or (num_clients, dimension) != (50, 100_000) else [0, 5]
                for dropped in drop_counts:
                    words = _mask_words(num_clients, params.neighbours, dimension, dropped)
                    label = {"mode": mode, "clients": num_clients, "threshold": threshold,
                             "dropped": dropped, "dimension": dimension}
                    if seconds_per_word is not None and words * seconds_per_word > SKIP_ABOVE_S:
                        estimate = words * seconds_per_word
                        rows.append({**label, "modulus_bits": params.modulus_bits, "secagg_s": None,
                                     "plain_s": None, "ratio": None, "per_client_s": None, "server_s": None,
                                     "note": f"skipped (est. {estimate:.0f}s)"})
                        continue
                    repeats = 1 if quick or (seconds_per_word and words * seconds_per_word > 5) else 3
                    row, stages = _measure(params, num_clients, dimension, dropped, repeats)
                    seconds_per_word = row["secagg_s"] / words
                    rows.append({**label, **row, "note": ""})
                    stage_rows.append({**label, **stages})
    shamir_rows = _shamir_rows([(5, 10)] if quick else [(5, 10), (25, 50), (100, 200)])
    return [
        ("Secure aggregation per round vs plain numpy sum", rows),
        ("Secure aggregation stages (seconds; client stages summed over clients)", stage_rows),
        ("Shamir t-of-n of a 32-byte secret: gdpfed (numpy, GF(2^31-1)) vs PyCryptodome (GF(2^128))", shamir_rows),
    ]


def _mask_words(num_clients: int, neighbours: int | None, dimension: int, dropped: int) -> int:
    """Mask words expanded per session: each client's self mask and pairwise masks, the server's removals."""
    degree = num_clients - 1 if neighbours is None else min(num_clients - 1, neighbours + neighbours % 2)
    clients = (num_clients - dropped) * (degree + 1)
    server = (num_clients - dropped) + dropped * degree
    return (clients + server) * dimension


def _measure(params: Any, num_clients: int, dimension: int, dropped: int, repeats: int) -> tuple[dict, dict]:
    from trainer.secagg import secure_sum

    rng = np.random.default_rng(0)
    vectors = {u: rng.uniform(-VALUE_BOUND, VALUE_BOUND, dimension) for u in range(num_clients)}
    drops = list(range(dropped))
    results: list[SecAggResult] = []

    def secagg() -> None:
        result = secure_sum(vectors, params, seed=len(results), drop_before_masking=drops)
        if result.aborted:
            raise RuntimeError(f"benchmark session aborted: {result.reason}")
        results.append(result)

    def plain() -> np.ndarray:
        total = np.zeros(dimension)
        for u in range(dropped, num_clients):
            total += vectors[u]
        return total

    secagg_seconds = median(time_calls(secagg, repeats=repeats, warmup=1 if repeats > 1 else 0))
    plain_seconds = median(time_calls(plain, repeats=max(repeats, 5)))
    measured = results[-repeats:]
    stages = {name: median([r.seconds[name] for r in measured]) for name in measured[0].seconds}
    client_work = sum(stages[s] for s in ("encode", "advertise_keys", "share_keys", "masked_input", "unmasking_clients"))
    row = {
        "modulus_bits": params.modulus_bits,
        "secagg_s": secagg_seconds,
        "plain_s": plain_seconds,
        "ratio": secagg_seconds / plain_seconds,
        "per_client_s": client_work / num_clients,
        "server_s": stages["unmasking_server"],
    }
    return row, {name: value for name, value in stages.items() if name != "total"}


def _shamir_rows(schemes: list[tuple[int, int]]) -> list[dict[str, Any]]:
    from Crypto.Protocol.SecretSharing import Shamir

    from trainer.secagg import shamir

    rows = []
    secret = os.urandom(32)
    for threshold, count in schemes:
        def ours() -> None:
            shares = shamir.split(secret, threshold, range(1, count + 1), os.urandom(32))
            if shamir.combine(shares[:threshold]) != secret:
                raise RuntimeError("gdpfed Shamir failed to reconstruct")

        def theirs() -> None:
            halves = [Shamir.split(threshold, count, secret[i : i + 16], ssss=False) for i in (0, 16)]
            if b"".join(Shamir.combine(h[:threshold], ssss=False) for h in halves) != secret:
                raise RuntimeError("PyCryptodome Shamir failed to reconstruct")

        repeats = 3 if count <= 50 else 1
        ours_seconds = median(time_calls(ours, repeats=repeats))
        theirs_seconds = median(time_calls(theirs, repeats=repeats))
        rows.append({"threshold": threshold, "shares": count, "gdpfed_s": ours_seconds,
                     "pycryptodome_s": theirs_seconds, "speedup": theirs_seconds / ours_seconds})
    return rows
