"""``gdpfed bench rounds``: secure aggregation at scale, and where a realistic round's time goes.

Table 1, the secure-aggregation stage alone (one pool session, ``trainer.secagg``) at
300 and 1,000 clients, d = 54,410 (the synthetic MLP) and 10^6: full mode, SecAgg+
(Bell et al.'s k and t for a third corrupt clients, no dropouts: what ``--secagg auto``
runs at that size), each serial and over all cores (``workers``), and the exact-sum
simulation; wall and CPU seconds (this process and its workers), the ChaCha20 keystream
the session generated and its rate, against the floor of the two primitives every
client must run: keystream bytes / the single-core ChaCha20 throughput of
``cryptography`` at the protocol's own call size (one fresh cipher per mask of d words,
written into a reused buffer, as ``trainer.secagg.prg.add_masks`` does), plus the
session's X25519 agreements (two per client per neighbour: channel and mask key) x one
agreement's cost, both measured in the same run; divided by the workers for the rows on
all cores. (Until 11-24 the floor was one 256 MiB call into freshly allocated memory,
which page faults bound at a third of the real rate: the stage looked at the floor when it
was not.) SecAgg+ rows also time the session's ``cryptography`` calls alone
(``primitive_calls_seconds``: the same agreements with their HKDF, AEAD seals and opens,
masks with their adds, through the protocol's own functions, without its logic, split over
the same workers): the least any implementation of the protocol on these primitives could
take here. Inputs are made before the clock starts where they fit in memory, as a round's
privatised vectors exist before its secure-aggregation stage. A configuration whose
estimated time or memory exceeds the suite's caps is listed as skipped with the estimate
(from the rows measured before it). A row whose first session takes under
``WARM_REPEAT_BELOW_SECONDS`` is run ``WARM_REPEATS`` more times and reports the median of
those (its note says so): a trainer runs a session every round in one process, and the
first session here also pays first-touch page faults on fresh memory.

Table 2, one trainer round (``RoundEngine.run``) of the scenario of issue 14: 3 groups x
1,000 clients (epsilon 1, 3, 8), ``gdpfed_plus``, FedProx's synthetic data, the MLP of
d = 54,410, 5 local steps of batch 32; 300 and 1,000 expected clients a round; the
stages select, train, privatize, secagg, aggregate, account, evaluate, per secure
aggregation mode (auto = the plan's graphs with the real protocol; exact_sum; full,
measured once). Median over the measured rounds after one warm-up round (also with ``--quick``:
without it the first row absorbed the process warm-up, its training 150x the next row's).

``--quick`` runs tiny versions of both (CI checks that they run and add up).
"""

from __future__ import annotations

import os
import resource
import statistics
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

STAGES = ("select", "train", "privatize", "secagg", "aggregate")
VALUE_BOUND = 2.0
# Skip a configuration estimated to take longer, or to hold more memory, than this.
MAX_SECONDS = 120.0
MAX_MEMORY_BYTES = 3 * 2**30
# Rows faster than this are re-run WARM_REPEATS times after the first and report the median.
WARM_REPEAT_BELOW_SECONDS = 2.5
WARM_REPEATS = 5
# The primitive-calls bound of such a row is the best of this many runs.
CALLS_REPEATS = 3


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished children (the workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def chacha20_throughput(call_bytes: int, total_bytes: int = 64 * 2**20, repeats: int = 3) -> float:
    """Bytes per second of ``cryptography``'s ChaCha20 on one core, best of ``repeats``.

    Measured as the protocol expands masks: a fresh cipher per call of ``call_bytes``
    (one mask of d words), into one reused buffer, so neither page faults nor allocation
    count; ``total_bytes`` per repeat.
    """
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    from trainer.secagg.prg import MASK_NONCE

    out, zeros = bytearray(call_bytes), bytes(call_bytes)
    calls = max(1, total_bytes // call_bytes)
    best = float("inf")
    for repeat in range(repeats):
        start = time.perf_counter()
        for call in range(calls):
            key = (repeat * calls + call).to_bytes(32, "little")
            Cipher(algorithms.ChaCha20(key, MASK_NONCE), mode=None).encryptor().update_into(zeros, out)
        best = min(best, time.perf_counter() - start)
    return calls * call_bytes / best


def x25519_seconds(agreements: int = 2_000, repeats: int = 3) -> float:
    """Seconds of one X25519 agreement (``exchange`` on a parsed public key) on one core, best of ``repeats``."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    private, public = X25519PrivateKey.generate(), X25519PrivateKey.generate().public_key()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(agreements):
            private.exchange(public)
        best = min(best, time.perf_counter() - start)
    return best / agreements


def primitive_calls_seconds(num_clients: int, degree: int, dimension: int, workers: int) -> float:
    """Wall seconds of a session's ``cryptography`` calls alone, spread like the session over ``workers``.

    The calls every client of a no-dropout session makes, through the protocol's own
    functions (``trainer.secagg.keys``, ``trainer.secagg.prg.add_masks``): parse its two
    private keys and derive their public keys; per neighbour one channel agreement
    (X25519 + HKDF), one AEAD object, one share sealed and one opened; per neighbour one
    mask agreement; and ``degree + 1`` masks (a fresh ChaCha20 per mask, wraparound add);
    plus the server's ``num_clients`` self masks. No protocol logic, encoding, Shamir
    arithmetic, routing or checks: what the session cannot do without, given design's
    primitives. The clients and the server's self masks are split evenly over the
    processes (``workers - 1`` forked children and this one), a lower bound on the
    session's split (``docs/benchmarks.md`` §Issue 17).
    """
    import multiprocessing
    import warnings

    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    from trainer.secagg import keys
    from trainer.secagg.prg import add_masks

    session_id = bytes(16)
    peer = X25519PrivateKey.generate().public_key()
    plaintext = bytes(4 + 2 * 64)  # a share: x, then 16 limbs of b_u and 16 of s_u^SK, 4 bytes each

    def clients(count: int, server_masks: int) -> None:
        total = np.zeros(dimension, dtype=np.uint32)
        for client in range(count):
            secret = client.to_bytes(32, "little")
            cipher_key, mask_key = keys.private_key_from_bytes(secret), keys.private_key_from_bytes(secret[::-1])
            keys.public_key_bytes(cipher_key), keys.public_key_bytes(mask_key)
            for _ in range(degree):
                channel = keys.channel_cipher(keys.agreed_key(cipher_key, peer, session_id, keys.CHANNEL_INFO))
                keys.open_sealed(channel, session_id, 1, 2, keys.seal(channel, session_id, 1, 2, plaintext))
            pairwise = [(keys.agreed_key(mask_key, peer, session_id, keys.PAIRWISE_MASK_INFO), 1)
                        for _ in range(degree)]
            add_masks(total, [(secret, 1), *pairwise])
        add_masks(total, [(index.to_bytes(32, "big"), 1) for index in range(server_masks)])

    client_split = np.array_split(np.arange(num_clients), workers)
    context = multiprocessing.get_context("fork")
    start = time.perf_counter()
    children = [context.Process(target=clients, args=(len(chunk), len(chunk)), daemon=True)
                for chunk in client_split[1:]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork in a multi-threaded process, as the session
        for child in children:
            child.start()
    clients(len(client_split[0]), len(client_split[0]))
    for child in children:
        child.join()
    elapsed = time.perf_counter() - start
    if any(child.exitcode != 0 for child in children):
        raise RuntimeError("a primitive-calls worker failed")
    return elapsed


class GridVectors(Mapping[int, np.ndarray]):
    """Clients' vectors made on access (memory O(d), not O(n d)), on the fixed-point grid as the engine's are."""

    def __init__(self, ids: list[int], dimension: int, scale: float) -> None:
        self._ids, self._dimension, self._scale = ids, dimension, scale

    def __getitem__(self, client: int) -> np.ndarray:
        rng = np.random.default_rng(client)
        return np.round(rng.uniform(-1, 1, self._dimension) * self._scale) / self._scale

    def __iter__(self) -> Iterator[int]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)


def run(quick: bool) -> list[tuple[str, list[dict[str, Any]]]]:
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    stage_rows, floors = stage_table(quick)
    round_rows, round_setup = round_table(quick)
    return [
        (
            f"Secure-aggregation stage, one pool session (on one core: ChaCha20 {floors}; "
            f"loadavg at start {load}; {os.cpu_count()} cores)",
            stage_rows,
        ),
        (f"Round breakdown, {round_setup}, gdpfed_plus (median seconds; round_s = select + train + privatize + "
         "secagg + aggregate + account; evaluate_s, one test-set evaluation after the rounds, is not in it)",
         round_rows),
    ]


def stage_table(quick: bool) -> tuple[list[dict[str, Any]], str]:
    """The stage rows, and the primitive costs their floors use (for the title)."""
    from planner.harary import DEFAULT_CORRUPT_FRACTION, harary_parameters
    from planner.schema import SecaggMode
    from trainer.secagg import choose_params, exact_sum, secure_sum
    from trainer.secagg.encoding import word_dtype
    from trainer.secagg.parallel import available_workers, session_workers
    from trainer.secagg.params import default_scale

    sizes = [(40, 2_000)] if quick else [(300, 54_410), (1_000, 54_410), (300, 1_000_000), (1_000, 1_000_000)]
    all_cores = max(2, available_workers()) if quick else available_workers()
    agreement_s = x25519_seconds(200 if quick else 2_000)
    throughputs = {dimension: chacha20_throughput(4 * dimension, (4 if quick else 64) * 2**20)
                   for dimension in sorted({d for _, d in sizes})}
    floors = ", ".join(f"{rate / 1e9:.2f} GB/s at d = {d:,}" for d, rate in throughputs.items())
    floors += f"; X25519 {agreement_s * 1e6:.0f} us an agreement"
    rows: list[dict[str, Any]] = []
    seconds_per_byte: float | None = None  # of the protocol, measured so far (for the skip estimates)
    for num_clients, dimension in sizes:
        ids = list(range(num_clients))
        threshold = int(0.88 * num_clients)  # the realistic plan's m_P / n
        found = harary_parameters(num_clients, DEFAULT_CORRUPT_FRACTION, 0.0)
        scale = default_scale(num_clients, VALUE_BOUND)  # as the round engine picks it: 32-bit words where they fit
        throughput = throughputs[dimension]
        made = GridVectors(ids, dimension, scale)
        # Made before the clock starts where they fit (a round's vectors exist before its stage).
        in_memory = 8 * dimension * num_clients <= MAX_MEMORY_BYTES // 4
        vectors: Mapping[int, np.ndarray] = {u: made[u] for u in ids} if in_memory else made
        variants: list[tuple[str, int | None, int]] = [("full", None, 1), ("full", None, all_cores)]
        if found is not None:
            variants += [("sparse", found.neighbours, 1), ("sparse", found.neighbours, all_cores)]
        variants.append(("exact_sum", None, 1))
        for mode, neighbours, workers in variants:
            graph: SecaggMode = "sparse" if mode == "sparse" else "full"
            params = choose_params(
                num_clients, threshold, VALUE_BOUND, scale=scale, mode=graph, neighbours=neighbours,
                share_threshold=found.share_threshold if neighbours is not None and found is not None else None,
            )
            degree = num_clients - 1 if neighbours is None else neighbours
            masks = num_clients * (degree + 1) + num_clients  # clients' masks and the server's self masks
            word_bytes = word_dtype(params.modulus_bits).itemsize
            keystream_bytes = masks * dimension * word_bytes if mode != "exact_sum" else 0
            agreements = 2 * num_clients * degree if mode != "exact_sum" else 0  # no dropouts: no server agreements
            memory = 8 * dimension * (num_clients if mode != "exact_sum" else 4)
            # m: the session's threshold m_P; t: the Shamir threshold of a share group (m in full mode).
            label = {"clients": num_clients, "d": dimension, "mode": mode, "m": threshold, "k": neighbours,
                     "t": None if mode == "exact_sum" else (
                         found.share_threshold if neighbours is not None and found is not None else threshold),
                     "workers": workers if mode != "exact_sum" else None}
            estimate = None if seconds_per_byte is None else keystream_bytes * seconds_per_byte
            if memory > MAX_MEMORY_BYTES or (estimate is not None and estimate > MAX_SECONDS * workers):
                why = f"needs ~{memory / 2**30:.1f} GiB" if memory > MAX_MEMORY_BYTES else f"est. {estimate:.0f} s serial"
                floor = keystream_bytes / throughput + agreements * agreement_s
                rows.append({**label, "wall_s": None, "cpu_s": None, "keystream_GB": keystream_bytes / 1e9,
                             "GB_per_s": None, "agreements": agreements, "floor_s": floor / workers,
                             "wall_vs_floor": None, "calls_s": None, "wall_vs_calls": None,
                             "note": f"skipped ({why})"})
                continue
            def session() -> tuple[Any, float, float]:
                cpu, start = cpu_seconds(), time.perf_counter()
                if mode == "exact_sum":
                    outcome = exact_sum(vectors, params, seed=1)
                else:
                    outcome = secure_sum(vectors, params, seed=1, workers=workers)
                return outcome, time.perf_counter() - start, cpu_seconds() - cpu

            result, wall, cpu = session()
            runs = 1
            if wall < WARM_REPEAT_BELOW_SECONDS:
                # A trainer runs a session every round in one long-lived process: the first
                # one here also pays for first-touch page faults on fresh memory (~2.4 us a
                # 4 KiB page on this VM, 0.01 s of a 0.05 s exact-sum session), so short rows
                # report the median of WARM_REPEATS more runs, as the round table warms up.
                timings = sorted((session()[1:] for _ in range(WARM_REPEATS)), key=lambda pair: pair[0])
                wall, cpu = timings[len(timings) // 2]
                runs += WARM_REPEATS
            if result.aborted:
                raise RuntimeError(f"benchmark session aborted: {result.reason}")
            generated = result.keystream_bytes
            if mode != "exact_sum" and workers == 1:
                seconds_per_byte = wall / generated
            # The floor of the primitives every client runs, spread over this row's workers.
            floor = (generated / throughput + agreements * agreement_s) / workers
            calls = None
            if mode == "sparse":  # the target rows; full mode's calls would double its minutes
                repeats = CALLS_REPEATS if wall < WARM_REPEAT_BELOW_SECONDS else 1
                calls = min(primitive_calls_seconds(num_clients, degree, dimension, workers) for _ in range(repeats))
            rows.append({
                **label, "wall_s": wall, "cpu_s": cpu, "keystream_GB": generated / 1e9,
                "GB_per_s": generated / wall / 1e9 if generated else None, "agreements": agreements,
                "floor_s": floor, "wall_vs_floor": wall / floor if generated else None,
                "calls_s": calls, "wall_vs_calls": wall / calls if calls else None,
                "note": f"loadavg {os.getloadavg()[0]:.1f}" + (f", median of {runs - 1} after a warm-up" if runs > 1 else "")
                + (", too small to pay for workers: a round runs it serially"
                   if generated and workers > 1 and session_workers(num_clients, degree, dimension, word_bytes) == 1
                   else ""),
            })
    return rows, floors


def round_table(quick: bool) -> tuple[list[dict[str, Any]], str]:
    """The round rows, and the setup they share (for the title)."""
    from planner import Scenario, make_plan
    from trainer.data import load_dataset
    from trainer.runner import TrainConfig

    per_group = 30 if quick else 1_000
    expected_counts = [18] if quick else [300, 1_000]
    measured_rounds = 1 if quick else 2
    dataset = load_dataset("synthetic", num_clients=3 * per_group, seed=0)
    base = dict(dataset="synthetic", model="mlp", rounds=50, local_steps=1 if quick else 5, batch_size=32, lr=0.05)
    if quick:
        base["model_options"] = {"hidden": [16]}
    rows = []
    for expected in expected_counts:
        scenario = Scenario.model_validate({
            "groups": [
                {"id": "strict", "epsilon": 1.0, "num_clients": per_group, "keep_ratio": 0.5},
                {"id": "medium", "epsilon": 3.0, "num_clients": per_group, "keep_ratio": 0.7},
                {"id": "relaxed", "epsilon": 8.0, "num_clients": per_group, "keep_ratio": 0.9},
            ],
            "delta": 1e-5, "rounds": 50, "clip_norm": 1.0, "model_dim": 1_146 if quick else 54_410,
            "expected_clients": expected, "min_clients_per_pool": 5,
        })
        plan = make_plan(scenario, "gdpfed_plus", clients_needed=False)
        variants = [("auto", "protocol", measured_rounds), ("auto", "exact_sum", measured_rounds)]
        # Full mode at 1,000 clients a round is minutes per round on two cores: measured at 300 only.
        if expected <= 300:
            variants.append(("full", "protocol", 1))
        for mode, execution, rounds in variants:
            config = TrainConfig(**base, secagg_mode=mode, secagg_execution=execution)
            row = _measure_round(plan, config, dataset, rounds, warmup=1)
            rows.append({"expected_clients": expected, "secagg": mode, "execution": execution, **row})
    return rows, f"3 groups x {per_group:,} clients (epsilon 1, 3, 8), FedProx synthetic data, MLP"


def _measure_round(plan: Any, config: Any, dataset: Any, rounds: int, warmup: int) -> dict[str, Any]:
    from trainer.engines import evaluate
    from trainer.runner import prepare_run
    from trainer.strategies import RoundContext
    from trainer.units.client.tally import ClientTally

    with tempfile.TemporaryDirectory() as tmp:  # prepare_run writes nothing; it only needs a path
        prepared = prepare_run(plan, plan.model_dump(mode="json"), config, Path(tmp) / "run", dataset=dataset,
                               device="cpu")
    ledger = ClientTally(plan)
    params = prepared.initial_params
    samples: dict[str, list[float]] = {name: [] for name in (*STAGES, "account", "total", "cpu", "clients")}
    graphs: dict[str, str] = {}
    for index in range(warmup + rounds):  # the first ``warmup`` rounds warm up the engines
        cpu = cpu_seconds()
        params, outcome = prepared.engine.run(RoundContext(index, index, config.seed), params)
        tick = time.perf_counter()
        ledger.record_round()
        ledger.spent()
        account = time.perf_counter() - tick
        if index < warmup:
            continue
        for stage in STAGES:
            samples[stage].append(outcome.timing[stage])
        samples["account"].append(account)
        samples["total"].append(sum(outcome.timing.values()) + account)
        samples["cpu"].append(cpu_seconds() - cpu)
        samples["clients"].append(sum(outcome.survived.values()))
        graphs = outcome.secagg
    tick = time.perf_counter()
    evaluate(prepared.model, params, dataset.test)
    evaluate_s = time.perf_counter() - tick
    row: dict[str, Any] = {"clients": statistics.median(samples["clients"]), "d": prepared.engine.dim}
    row["round_s"] = statistics.median(samples["total"])
    row["cpu_s"] = statistics.median(samples["cpu"])
    row.update({f"{stage}_s": statistics.median(samples[stage]) for stage in (*STAGES, "account")})
    row["evaluate_s"] = evaluate_s
    row["secagg_share"] = row["secagg_s"] / row["round_s"]
    row["graphs"] = "; ".join(f"{pool} {graph}" for pool, graph in graphs.items())
    row["loadavg"] = f"{os.getloadavg()[0]:.1f}"
    return row
