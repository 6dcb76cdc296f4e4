"""``gdpfed bench rounds``: secure aggregation at scale, and where a realistic round's time goes.

Table 1, the secure-aggregation stage alone (one pool session, ``trainer.secagg``) at
300 and 1,000 clients, d = 54,410 (the synthetic MLP) and 10^6: full mode, SecAgg+
(Bell et al.'s k and t for a third corrupt clients, no dropouts: what ``--secagg auto``
runs at that size), each serial and over all cores (``workers``), and the exact-sum
simulation; wall and CPU seconds (this process and its workers), the ChaCha20 keystream
the session generated and its rate, against the physical floor = keystream bytes /
the single-core ChaCha20 throughput of ``cryptography`` measured in the same run (one
256 MiB keystream call). A configuration whose estimated time or memory exceeds the
suite's caps is listed as skipped with the estimate (from the rows measured before it).

Table 2, one trainer round (``RoundEngine.run``) of the scenario of issue 14: 3 groups x
1,000 clients (epsilon 1, 3, 8), ``gdpfed_plus``, LEAF synthetic data, the MLP of
d = 54,410, 5 local steps of batch 32; 300 and 1,000 expected clients a round; the
stages select, train, privatize, secagg, aggregate, account, evaluate, per secure
aggregation mode (auto = the plan's graphs with the real protocol; exact_sum; full,
measured once). Median over the measured rounds after one warm-up round (none with ``--quick``).

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


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished children (the workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def chacha20_throughput(num_bytes: int = 256 * 2**20, repeats: int = 3) -> float:
    """Bytes per second of one large ChaCha20 keystream call of ``cryptography`` on one core (best of repeats)."""
    from trainer.secagg.prg import keystream

    best = float("inf")
    for repeat in range(repeats):
        start = time.perf_counter()
        keystream(bytes([repeat]) * 32, num_bytes)
        best = min(best, time.perf_counter() - start)
    return num_bytes / best


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
    throughput = chacha20_throughput(8 * 2**20 if quick else 256 * 2**20)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    stage_rows = stage_table(quick, throughput)
    round_rows = round_table(quick)
    return [
        (
            f"Secure-aggregation stage, one pool session (ChaCha20 on one core: {throughput / 1e9:.2f} GB/s; "
            f"loadavg at start {load}; {os.cpu_count()} cores)",
            stage_rows,
        ),
        ("Round breakdown, 3 groups x 1,000 clients, gdpfed_plus, synthetic MLP (median seconds)", round_rows),
    ]


def stage_table(quick: bool, throughput: float) -> list[dict[str, Any]]:
    from planner.harary import DEFAULT_CORRUPT_FRACTION, harary_parameters
    from trainer.secagg import choose_params, exact_sum, secure_sum
    from trainer.secagg.parallel import available_workers
    from trainer.secagg.params import Mode

    sizes = [(40, 2_000)] if quick else [(300, 54_410), (1_000, 54_410), (300, 1_000_000), (1_000, 1_000_000)]
    all_cores = max(2, available_workers()) if quick else available_workers()
    rows: list[dict[str, Any]] = []
    seconds_per_byte: float | None = None  # of the protocol, measured so far (for the skip estimates)
    for num_clients, dimension in sizes:
        ids = list(range(num_clients))
        threshold = int(0.88 * num_clients)  # the realistic plan's m_P / n
        found = harary_parameters(num_clients, DEFAULT_CORRUPT_FRACTION, 0.0)
        scale = 2.0**20
        vectors = GridVectors(ids, dimension, scale)
        variants: list[tuple[str, int | None, int]] = [("full", None, 1), ("full", None, all_cores)]
        if found is not None:
            variants += [("sparse", found.neighbours, 1), ("sparse", found.neighbours, all_cores)]
        variants.append(("exact_sum", None, 1))
        for mode, neighbours, workers in variants:
            graph: Mode = "sparse" if mode == "sparse" else "full"
            params = choose_params(
                num_clients, threshold, VALUE_BOUND, scale=scale, mode=graph, neighbours=neighbours,
                share_threshold=found.share_threshold if neighbours is not None and found is not None else None,
            )
            degree = num_clients - 1 if neighbours is None else neighbours
            masks = num_clients * (degree + 1) + num_clients  # clients' masks and the server's self masks
            keystream_bytes = masks * dimension * 4 if mode != "exact_sum" else 0
            memory = 8 * dimension * (num_clients if mode != "exact_sum" else 4)
            label = {"clients": num_clients, "d": dimension, "mode": mode, "k": neighbours,
                     "t": found.share_threshold if neighbours is not None and found is not None else threshold,
                     "workers": workers if mode != "exact_sum" else None}
            estimate = None if seconds_per_byte is None else keystream_bytes * seconds_per_byte
            if memory > MAX_MEMORY_BYTES or (estimate is not None and estimate > MAX_SECONDS * workers):
                why = f"needs ~{memory / 2**30:.1f} GiB" if memory > MAX_MEMORY_BYTES else f"est. {estimate:.0f} s serial"
                rows.append({**label, "wall_s": None, "cpu_s": None, "keystream_GB": keystream_bytes / 1e9,
                             "GB_per_s": None, "floor_s": keystream_bytes / throughput, "wall_vs_floor": None,
                             "note": f"skipped ({why})"})
                continue
            cpu, start = cpu_seconds(), time.perf_counter()
            if mode == "exact_sum":
                result = exact_sum(vectors, params, seed=1)
            else:
                result = secure_sum(vectors, params, seed=1, workers=workers)
            wall = time.perf_counter() - start
            cpu = cpu_seconds() - cpu
            if result.aborted:
                raise RuntimeError(f"benchmark session aborted: {result.reason}")
            generated = result.keystream_bytes
            if mode != "exact_sum" and workers == 1:
                seconds_per_byte = wall / generated
            rows.append({
                **label, "wall_s": wall, "cpu_s": cpu, "keystream_GB": generated / 1e9,
                "GB_per_s": generated / wall / 1e9 if generated else None,
                "floor_s": generated / throughput, "wall_vs_floor": wall / (generated / throughput) if generated else None,
                "note": f"loadavg {os.getloadavg()[0]:.1f}",
            })
    return rows


def round_table(quick: bool) -> list[dict[str, Any]]:
    from planner import Scenario, make_plan
    from trainer.data import load_dataset
    from trainer.run.runner import TrainConfig

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
            row = _measure_round(plan, config, dataset, rounds, warmup=0 if quick else 1)
            rows.append({"expected_clients": expected, "secagg": mode, "execution": execution, **row})
    return rows


def _measure_round(plan: Any, config: Any, dataset: Any, rounds: int, warmup: int) -> dict[str, Any]:
    from trainer.engines import evaluate
    from trainer.run.ledger import PrivacyLedger
    from trainer.run.runner import prepare_run
    from trainer.strategies import RoundContext

    with tempfile.TemporaryDirectory() as tmp:  # prepare_run writes nothing; it only needs a path
        prepared = prepare_run(plan, plan.model_dump(mode="json"), config, Path(tmp) / "run", dataset=dataset,
                               device="cpu")
    ledger = PrivacyLedger(plan)
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
