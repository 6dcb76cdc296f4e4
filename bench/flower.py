"""A plan round on Flower against the same round in ``gdpfed train`` (``gdpfed bench flower``).

Same plan (``gdpfed_plus``, two groups), same data and model (``digits``, the default MLP),
same seed, three executors in one run:

- ``gdpfed train``: the simulator (all clients in one process, batched training);
- ``flower loopback``: the real ServerApp and ClientApp over ``LoopbackGrid`` (Flower's
  message serialisation, one client trained at a time, no processes);
- ``flower processes``: a real ``flower-superlink`` and one ``flower-supernode`` per client
  on 127.0.0.1, ``flwr run`` (``trainer.flower.local``; one ``trainer.flower.superexec``
  starts the ClientApp processes, at most twice the CPU count alive at once);

and, on each of the two Flower transports, the peer: Flower's own plain ``FedAvg``
(``bench.flower_fedavg``: the same training on the same nodes, one message per node, no
clipping, noise or secure aggregation, a fixed-size sample of the expected size); on
processes the two runs share one SuperLink and one set of SuperNodes, one after the other.
``vs_fedavg`` is a gdpfed round over the plain round on the same transport: what gdpfed's
mechanism costs on Flower.

For the processes run each ClientApp process writes its timings on the node
(``GDPFED_FLOWER_PROFILE``), which splits a protocol step into: *process start* (from the
process's creation to gdpfed's ClientApp module being loaded: Python, flwr, Flower pulling
the message and unpacking the app), *setup* (torch, data and model, in KEYS),
*training* (``client_update``), *protocol* (the rest of the handler: privatisation and
secure aggregation's client work), and *transport and waiting* (the step's wall time
less its slowest client process: the SuperNodes' polling of the SuperLink, SuperExec's
polling, the pushes and pulls of messages and objects). Per-step values are the median
over the step's clients; the round's are summed over the four steps.
"""

from __future__ import annotations

import json
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

STEPS = ("keys", "shares", "masked", "unmask")


def _plan(total: int, expected: float, rounds: int, *, adaptive_clip: dict[str, float] | None = None) -> Any:
    from planner import make_plan
    from planner.schema import Scenario

    half = total // 2
    scenario = Scenario(
        groups=[{"id": "strict", "epsilon": 4.0, "num_clients": half},
                {"id": "relaxed", "epsilon": 12.0, "num_clients": total - half}],
        delta=1e-4, rounds=rounds, clip_norm=1.0, model_dim=55_210, expected_clients=expected, min_clients_per_pool=2,
        adaptive_clip=adaptive_clip,
    )
    return make_plan(scenario, "gdpfed_plus", clients_needed=False)


def step_breakdown(records: Iterable[dict[str, Any]], step_seconds: dict[str, float]) -> dict[str, float]:
    """Per-round seconds of process start, setup, training, protocol and transport (see the module docstring).

    ``records``: one round's profile lines (``trainer.flower.client_app._profile``);
    ``step_seconds``: that round's server-side step times (``rounds.jsonl`` timing).
    """
    by_step: dict[str, list[dict[str, Any]]] = {step: [] for step in STEPS}
    for record in records:
        step = record["step"].rsplit("_", 1)[-1]
        if step in by_step:
            by_step[step].append(record)
    totals = dict.fromkeys(("process_start_s", "setup_s", "train_s", "protocol_s", "transport_s"), 0.0)
    for step, items in by_step.items():
        if not items:
            continue
        starts = [r["module_loaded"] - r["process_start"] for r in items]
        handlers = [r["handler_end"] - r["handler_start"] for r in items]
        setup = [r.get("setup_s", 0.0) for r in items]
        train = [r.get("train_s", 0.0) for r in items]
        totals["process_start_s"] += statistics.median(starts)
        totals["setup_s"] += statistics.median(setup)
        totals["train_s"] += statistics.median(train)
        totals["protocol_s"] += statistics.median(h - s - t for h, s, t in zip(handlers, setup, train))
        slowest = max(r["handler_end"] - r["process_start"] for r in items)
        totals["transport_s"] += max(0.0, step_seconds[step] - slowest)
    return totals


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _simulator(plan: Any, config: Any, dataset: Any, out: Path) -> dict[str, Any]:
    from trainer.run.metrics import read_rounds
    from trainer.runner import execute_run, prepare_run

    load = _load()
    execute_run(prepare_run(plan, plan.model_dump(mode="json"), config, out, dataset=dataset), progress=_quiet(config.rounds))
    records = read_rounds(out / "rounds.jsonl")
    return _row("gdpfed train", records, load, {"train_s": statistics.median(r.timing["train"] for r in records)})


def _quiet(rounds: int) -> Any:
    import io

    from trainer.run.progress import Progress

    return Progress(rounds, 0, stream=io.StringIO(), use_bar=False)


def _row(executor: str, records: list[Any], load: str, extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "executor": executor,
        "clients_per_round": statistics.median(sum(r.sampled.values()) for r in records),
        "round_s": statistics.median(r.seconds for r in records),
        "first_round_s": records[0].seconds,
        "rounds_measured": len(records),
        **{f"{step}_s": statistics.median(r.timing.get(step, 0.0) for r in records) for step in STEPS},
        **extra,
        "loadavg": load,
    }


def _bundle(plan: Any, config: Any, out_dir: Path, app_dir: Path) -> dict[str, Any]:
    from trainer.flower.bundle import write_bundle
    from trainer.flower.settings import FlowerOptions, run_config_of

    run_config = run_config_of(FlowerOptions.model_validate({"out-dir": str(out_dir)}), config)
    write_bundle(app_dir, plan.model_dump(mode="json"), run_config)
    return run_config


def _cold_nodes() -> None:
    """Forget the in-process nodes' data and model (``trainer.flower.training``'s cache), so each
    loopback executor pays its own first-round setup as a fresh node process does."""
    from trainer.flower.training import _workspace

    _workspace.cache_clear()


def _loopback(plan: Any, config: Any, dataset: Any, work: Path, executor: str = "flower loopback") -> dict[str, Any]:
    from trainer.flower.cli import simulation_nodes
    from trainer.flower.client_app import build_client_app
    from trainer.flower.server_app import run_plan
    from trainer.flower.testing import LoopbackGrid
    from trainer.run.metrics import read_rounds

    run_config = _bundle(plan, config, work / "run", work / "app")
    nodes = simulation_nodes(plan, None, config.seed)
    grid = LoopbackGrid(build_client_app(work / "app"), {1 + i: n for i, n in enumerate(nodes)}, run_config)
    _cold_nodes()
    load = _load()
    run_plan(grid, plan.model_dump(mode="json"), run_config, dataset=dataset, progress=_quiet(config.rounds),
             log=lambda _text: None)
    records = read_rounds(work / "run" / "rounds.jsonl")
    extra = {"train_s": grid.client_seconds.get("train.gdpfed_keys", 0.0)
             / max(1, sum(sum(r.sampled.values()) for r in records))}
    if "evaluate.gdpfed_personal" in grid.client_seconds:
        # the nodes scoring their personal models, per round (every node, every evaluated round)
        extra["personal_eval_s"] = grid.client_seconds["evaluate.gdpfed_personal"] / len(records)
    return _row(executor, records, load, extra)


def _processes(plan: Any, config: Any, federation: Any, work: Path, profile: Path) -> dict[str, Any]:
    from trainer.run.metrics import read_rounds

    _bundle(plan, config, work / "run", work / "app")
    load = _load()
    started = time.perf_counter()
    code = federation.run(work / "app", {"min-nodes": str(len(federation.node_configs))}, timeout_s=3600)
    wall = time.perf_counter() - started
    if code != 0:
        raise RuntimeError(f"flwr run failed; see {federation.work}")
    records = read_rounds(work / "run" / "rounds.jsonl")
    lines = [json.loads(line) for path in profile.glob("*.jsonl") for line in path.read_text().splitlines()]
    breakdowns = []
    for record in records:
        per_round = [line for line in lines if line.get("round") == record.round]
        breakdowns.append(step_breakdown(per_round, {s: record.timing.get(s, 0.0) for s in STEPS}))
    extra = {name: statistics.median(b[name] for b in breakdowns) for name in breakdowns[0]}
    row = _row("flower processes", records, load, extra)
    # Round 0's selection sends a hello (one process start a node) to every node the discovery
    # before it did not hear from within the step timeout: discovery, paid once a run, reported
    # apart so the round compares with FedAvg's.
    discovery = records[0].timing.get("select", 0.0)
    row["discovery_s"] = discovery
    row["first_round_s"] = records[0].seconds - discovery
    row["round_s"] = statistics.median([row["first_round_s"], *(r.seconds for r in records[1:])])
    row["run_wall_s"] = wall
    row["loadavg_after"] = _load()
    return row


def _plain_row(executor: str, seconds: list[float], load: str, clients: float) -> dict[str, Any]:
    return {"executor": executor, "clients_per_round": clients, "round_s": statistics.median(seconds),
            "first_round_s": seconds[0], "rounds_measured": len(seconds), "loadavg": load}


def _fedavg_loopback(plan: Any, config: Any, work: Path) -> dict[str, Any]:
    from bench.flower_fedavg import build_client_app, run_fedavg, write_fedavg_bundle
    from trainer.flower.cli import simulation_nodes
    from trainer.flower.settings import FlowerOptions, run_config_of
    from trainer.flower.testing import LoopbackGrid

    run_config = run_config_of(FlowerOptions.model_validate({"out-dir": str(work / "run")}), config)
    write_fedavg_bundle(work / "app", plan.model_dump(mode="json"), run_config)
    nodes = simulation_nodes(plan, None, config.seed)
    grid = LoopbackGrid(build_client_app(work / "app"), {1 + i: n for i, n in enumerate(nodes)}, run_config)
    _cold_nodes()
    load = _load()
    flwr_log = logging.getLogger("flwr")
    level = flwr_log.level
    flwr_log.setLevel(logging.WARNING)  # FedAvg logs every round's progress at INFO
    try:
        seconds = run_fedavg(grid, plan.model_dump(mode="json"), run_config)
    finally:
        flwr_log.setLevel(level)
    return _plain_row("flower fedavg loopback (plain)", seconds, load, _fedavg_sample(plan))


def _fedavg_sample(plan: Any) -> int:
    # Flower's FedAvg samples int(connected nodes * fraction_train) nodes, at least min_train_nodes (2)
    total = plan.scenario.total_clients
    return max(2, int(total * (plan.scenario.participation / total)))


def _fedavg_processes(plan: Any, config: Any, federation: Any, work: Path) -> dict[str, Any]:
    from bench.flower_fedavg import write_fedavg_bundle
    from trainer.flower.settings import FlowerOptions, run_config_of

    run_config = run_config_of(FlowerOptions.model_validate({"out-dir": str(work / "run")}), config)
    write_fedavg_bundle(work / "app", plan.model_dump(mode="json"), run_config)
    load = _load()
    started = time.perf_counter()
    code = federation.run(work / "app", timeout_s=3600)
    wall = time.perf_counter() - started
    if code != 0:
        raise RuntimeError(f"flwr run (plain FedAvg) failed; see {federation.work}")
    seconds = json.loads((work / "run" / "fedavg_rounds.json").read_text())
    row = _plain_row("flower fedavg processes (plain)", seconds, load, _fedavg_sample(plan))
    row["run_wall_s"] = wall
    row["loadavg_after"] = _load()
    return row


def _process_pair(plan: Any, config: Any, work: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """gdpfed's run and the plain FedAvg run, one after the other on the same SuperLink and SuperNodes."""
    from trainer.flower.cli import simulation_nodes
    from trainer.flower.local import LocalFederation

    profile = work / "profile"
    profile.mkdir(parents=True)
    nodes = simulation_nodes(plan, None, config.seed)
    started = time.perf_counter()
    with LocalFederation(work / "flower", nodes, extra_env={"GDPFED_FLOWER_PROFILE": str(profile)}) as federation:
        gdpfed = _processes(plan, config, federation, work / "gdpfed", profile)
        plain = _fedavg_processes(plan, config, federation, work / "fedavg")
    gdpfed["federation_wall_s"] = time.perf_counter() - started
    return gdpfed, plain


def _progress(total: int, row: dict[str, Any]) -> dict[str, Any]:
    """Each executor's row on stderr as it finishes: a long run interrupted still has its numbers."""
    print(json.dumps({"clients": total, **row}), file=sys.stderr, flush=True)
    return row


def measure(total: int, expected: float, rounds: int, *, process_rounds: int | None = None) -> list[dict[str, Any]]:
    """The executors on one plan of ``total`` clients (``expected`` a round) over ``rounds`` rounds
    (``process_rounds`` on real processes; 0: none), each Flower one beside Flower's plain FedAvg
    on the same transport."""
    from trainer.data import load_dataset
    from trainer.runner import TrainConfig

    plan = _plan(total, expected, rounds)
    config = TrainConfig(dataset="digits", model="mlp", rounds=rounds, local_steps=5, batch_size=32, lr=0.05)
    dataset = load_dataset("digits", num_clients=total, seed=0)
    with tempfile.TemporaryDirectory(prefix="gdpfed-bench-flower-") as tmp:
        work = Path(tmp)
        simulated = _progress(total, _simulator(plan, config, dataset, work / "sim"))
        pairs = [(_progress(total, _loopback(plan, config, dataset, work / "loopback")),
                  _progress(total, _fedavg_loopback(plan, config, work / "fedavg")))]
        process_rounds = rounds if process_rounds is None else process_rounds
        if process_rounds:
            pair = _process_pair(plan, config.model_copy(update={"rounds": process_rounds}), work / "processes")
            pairs.append((_progress(total, pair[0]), _progress(total, pair[1])))
    for gdpfed, plain in pairs:
        gdpfed["vs_fedavg"] = gdpfed["round_s"] / plain["round_s"]
        plain["vs_fedavg"] = 1.0
    rows = [simulated, *(row for pair in pairs for row in pair)]
    for row in rows:
        row["clients"] = total
        row["vs_train"] = row["round_s"] / simulated["round_s"]
    return rows


# FedHDP's row: ratio r = 0.3 on the strict pool, Ditto's lambda 0.1, adaptive clipping (its
# count's noise sigma_b = 2), personal models scored on a quarter of each client's rows held out.
FEDHDP_OPTIONS = {"ratios": {"P1": 0.3}, "lambdas": 0.1, "adaptive_clip": True}


def measure_fedhdp(total: int, expected: float, rounds: int) -> list[dict[str, Any]]:
    """FedHDP (``--strategy fedhdp``) in ``gdpfed train`` and over ``LoopbackGrid``: the same plan
    with an ``adaptive_clip`` block, personal models kept on the nodes and scored there every round."""
    from trainer.data import load_dataset
    from trainer.runner import TrainConfig

    plan = _plan(total, expected, rounds, adaptive_clip={"count_noise_std": 2.0})
    config = TrainConfig(dataset="digits", model="mlp", rounds=rounds, local_steps=5, batch_size=32, lr=0.05,
                         strategy="fedhdp", strategy_options=FEDHDP_OPTIONS,
                         dataset_options={"client_test_fraction": 0.25}, eval_every=1)
    dataset = load_dataset("digits", num_clients=total, seed=0, client_test_fraction=0.25)
    with tempfile.TemporaryDirectory(prefix="gdpfed-bench-flower-fedhdp-") as tmp:
        work = Path(tmp)
        simulated = _progress(total, {**_simulator(plan, config, dataset, work / "sim"), "executor": "gdpfed train fedhdp"})
        loopback = _progress(total, _loopback(plan, config, dataset, work / "loopback", "flower loopback fedhdp"))
    rows = [simulated, loopback]
    for row in rows:
        row["clients"] = total
        row["vs_train"] = row["round_s"] / simulated["round_s"]
    return rows


def run(quick: bool) -> list[tuple[str, list[dict[str, Any]]]]:
    # (clients, expected a round, rounds, rounds on real processes): a round on processes is
    # about four process starts a sampled node (and discovery one a node), every round as cold as
    # the first, so one round there keeps the suite under 10 minutes on a quiet 2-core machine
    # (docs/benchmarks.md "Flower").
    sizes = [(4, 4.0, 1, 1)] if quick else [(10, 8.0, 3, 1), (50, 10.0, 2, 1)]
    rows = [row for total, expected, rounds, process_rounds in sizes
            for row in measure(total, expected, rounds, process_rounds=process_rounds)]
    title = ("Flower round vs gdpfed train and Flower's plain FedAvg: digits MLP (d = 55,210), gdpfed_plus, "
             "seconds per round (median of the rounds; vs_train = round_s / gdpfed train's; vs_fedavg = round_s / "
             "plain FedAvg's on the same transport)")
    # the other units' rounds on Flower, each its own table (bench/flower_units.py)
    from bench import flower_units

    total, expected, rounds, _ = sizes[0]
    fedhdp_title = ("FedHDP on Flower vs gdpfed train: the same plan with adaptive clipping, ratio 0.3, Ditto "
                    "lambda 0.1, personal models on the nodes scored every round (vs_train = round_s / gdpfed "
                    "train fedhdp's)")
    return [(title, rows), (fedhdp_title, measure_fedhdp(total, expected, rounds)), *flower_units.run(quick)]
