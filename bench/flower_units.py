"""Silo and metric plans' rounds on Flower against the same rounds in ``gdpfed train``
(``gdpfed bench flower``'s unit tables; docs/benchmarks.md "Flower").

Per unit, one plan and three executors: ``gdpfed train`` (the simulator, every entity in
one process), ``flower loopback`` (the real ServerApp and ClientApp over ``LoopbackGrid``,
each node's work computed alone, one after the other) and ``flower processes``
(``flower-superlink`` and one ``flower-supernode`` per silo or client on 127.0.0.1,
``flwr run``: a process per message). ``train_s`` is the round's training
(``rounds.jsonl``'s ``timing.train``: on Flower the nodes' work and their messages).

- silo (``silo_sample``): an MR-MTL plan, ``rotated_digits`` with the linear model, 50
  examples and batch 10 a silo; every silo runs a DP-SGD pass every round;
- metric (``metric_local``): IFCA with Laplace releases (public radius 0.05, nu 5, two
  hypotheses), ``metric_synthetic`` with the paper's linear model (d = 2), one local step
  of batch 10; half the clients release a round.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.flower import _load, _progress, _quiet


def _silo_setup(silos: int, rounds: int) -> tuple[Any, Any, Any]:
    from planner.units import make_plan
    from planner.units.silo_sample import SiloScenario
    from trainer.data.silos import load_silo_data
    from trainer.runner import TrainConfig

    plan: Any = make_plan(SiloScenario.model_validate({
        "silos": [{"id": f"s{k}", "num_samples": 50, "epsilon": 2.0} for k in range(silos)],
        "delta": 1e-5, "rounds": rounds, "batch_size": 10, "clip_norm": 1.0, "accountant": "rdp",
    }), "mrmtl")
    config = TrainConfig(dataset="rotated_digits", model="mlp", model_options={"hidden": []}, rounds=rounds, lr=0.1,
                         strategy_options={"prox": 0.5})
    return plan, config, load_silo_data("rotated_digits", [s.num_samples for s in plan.silos], seed=0)


def _metric_setup(clients: int, rounds: int) -> tuple[Any, Any, Any]:
    from planner.units.metric_local import MetricScenario, plan_metric
    from trainer.data.metric_synthetic import load_metric_synthetic
    from trainer.runner import TrainConfig

    plan = plan_metric(MetricScenario.model_validate({
        "groups": [{"id": "all", "num_clients": clients, "noise_multiplier": 5.0, "leakage_budget": 100.0}],
        "rounds": rounds, "model_dim": 2, "clients_per_round": clients // 2, "hypotheses": 2, "radius_rule": "public",
        "radius": 0.05,
    }))
    config = TrainConfig(dataset="metric_synthetic", partition="natural", model="mlp",
                         model_options={"hidden": [], "bias": False}, local_steps=1, batch_size=10, lr=0.1,
                         rounds=rounds, strategy="metric_ifca", engine="loop")
    return plan, config, load_metric_synthetic(num_clients=clients, seed=0)


SETUPS = {"silo_sample": (_silo_setup, "mrmtl"), "metric_local": (_metric_setup, "metric_ifca")}


def _row(executor: str, unit: str, size: int, records: list[Any], load: str, **extra: Any) -> dict[str, Any]:
    return {
        "executor": executor, "unit": unit, "method": SETUPS[unit][1], "nodes": size,
        "per_round": statistics.median(sum(r.sampled.values()) for r in records),
        "round_s": statistics.median(r.seconds for r in records), "first_round_s": records[0].seconds,
        "rounds_measured": len(records), "train_s": statistics.median(r.timing.get("train", 0.0) for r in records),
        **extra, "loadavg": load,
    }


def _bundle(plan: Any, config: Any, out_dir: Path, app_dir: Path) -> dict[str, Any]:
    from trainer.flower.bundle import write_bundle
    from trainer.flower.settings import FlowerOptions, run_config_of

    run_config = run_config_of(FlowerOptions.model_validate({"out-dir": str(out_dir)}), config)
    write_bundle(app_dir, plan.model_dump(mode="json"), run_config)
    return run_config


def _cold_nodes() -> None:
    """Forget the in-process nodes' data and models, so each node pays its setup as a fresh process does."""
    from trainer.flower.silo import _silo_workspace
    from trainer.flower.training import _workspace

    _silo_workspace.cache_clear()
    _workspace.cache_clear()


def measure(unit: str, size: int, rounds: int, *, process_rounds: int) -> list[dict[str, Any]]:
    """The three executors on ``unit``'s plan of ``size`` silos or clients (``process_rounds`` on real processes; 0: none)."""
    from trainer.flower.cli import simulation_nodes
    from trainer.flower.client_app import build_client_app
    from trainer.flower.local import LocalFederation
    from trainer.flower.server_app import run_plan
    from trainer.flower.testing import LoopbackGrid
    from trainer.run.metrics import read_rounds
    from trainer.runner import execute_run, prepare_run

    plan, config, data = SETUPS[unit][0](size, rounds)
    document = plan.model_dump(mode="json")
    nodes = simulation_nodes(plan, None, 0)
    rows = []
    with tempfile.TemporaryDirectory(prefix="gdpfed-bench-flower-units-") as tmp:
        work = Path(tmp)
        load = _load()
        execute_run(prepare_run(plan, document, config, work / "sim", dataset=data), progress=_quiet(rounds))
        rows.append(_progress(size, _row("gdpfed train", unit, size, read_rounds(work / "sim" / "rounds.jsonl"), load)))

        run_config = _bundle(plan, config, work / "loopback" / "run", work / "loopback" / "app")
        grid = LoopbackGrid(build_client_app(work / "loopback" / "app"), {1 + i: n for i, n in enumerate(nodes)},
                            run_config)
        _cold_nodes()
        load = _load()
        run_plan(grid, document, run_config, dataset=data, progress=_quiet(rounds), log=lambda _text: None)
        records = read_rounds(work / "loopback" / "run" / "rounds.jsonl")
        rows.append(_progress(size, _row("flower loopback", unit, size, records, load)))
        if process_rounds:
            short = config.model_copy(update={"rounds": process_rounds})
            _bundle(plan, short, work / "processes" / "run", work / "processes" / "app")
            load = _load()
            started = time.perf_counter()
            with LocalFederation(work / "processes" / "flower", nodes) as federation:
                code = federation.run(work / "processes" / "app", {"min-nodes": str(len(nodes))}, timeout_s=3600)
            if code != 0:
                raise RuntimeError(f"flwr run of the {unit} plan failed; see {work / 'processes' / 'flower'}")
            records = read_rounds(work / "processes" / "run" / "rounds.jsonl")
            rows.append(_progress(size, _row("flower processes", unit, size, records, load,
                                             run_wall_s=time.perf_counter() - started)))
    for row in rows:
        row["vs_train"] = row["round_s"] / rows[0]["round_s"]
    return rows


def run(quick: bool) -> list[tuple[str, list[dict[str, Any]]]]:
    # a round on processes is one process start a node at work (and discovery one a node): one round there
    silo_sizes = [(2, 1, 1)] if quick else [(4, 3, 1), (10, 2, 1)]
    metric_sizes = [(4, 1, 1)] if quick else [(10, 3, 1), (20, 2, 1)]
    silo = [row for n, rounds, p in silo_sizes for row in measure("silo_sample", n, rounds, process_rounds=p)]
    metric = [row for n, rounds, p in metric_sizes for row in measure("metric_local", n, rounds, process_rounds=p)]
    return [
        ("Silo plans (MR-MTL) on Flower vs gdpfed train: rotated_digits, linear model, 50 examples and batch 10 a silo, "
         "seconds per round (median of the rounds; vs_train = round_s / gdpfed train's)", silo),
        ("Metric plans (IFCA, Laplace releases) on Flower vs gdpfed train: metric_synthetic, d = 2, half the clients "
         "a round, seconds per round (median of the rounds; vs_train = round_s / gdpfed train's)", metric),
    ]
