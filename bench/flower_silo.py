"""A silo plan's round on Flower against the same round in ``gdpfed train`` (``gdpfed bench flower``'s silo table).

One MR-MTL plan (``silo_sample``: every silo runs DP-SGD every round with its own
sigma_k), ``rotated_digits`` with the linear model (``mlp``, no hidden layer), 50 examples
and batch 10 a silo, seed 0, three executors: ``gdpfed train`` (all silos' DP-SGD batched
in one process), ``flower loopback`` (the real ServerApp and ClientApp over
``LoopbackGrid``: each silo's pass computed by its node alone, one after the other) and
``flower processes`` (``flower-superlink`` and one ``flower-supernode`` per silo on
127.0.0.1, ``flwr run``: a process per message). ``train_s`` is the round's DP-SGD
(``rounds.jsonl``'s ``timing.train``: on Flower the nodes' passes and their messages).
docs/benchmarks.md "Flower".
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.flower import _load, _progress, _quiet


def _plan(silos: int, rounds: int) -> Any:
    from planner.units import make_plan
    from planner.units.silo_sample import SiloScenario

    scenario = SiloScenario.model_validate({
        "silos": [{"id": f"s{k}", "num_samples": 50, "epsilon": 2.0} for k in range(silos)],
        "delta": 1e-5, "rounds": rounds, "batch_size": 10, "clip_norm": 1.0, "accountant": "rdp",
    })
    return make_plan(scenario, "mrmtl")


def _row(executor: str, records: list[Any], load: str, **extra: Any) -> dict[str, Any]:
    return {
        "executor": executor, "unit": "silo_sample", "method": "mrmtl",
        "silos": records[0].sampled.get("silos"),
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


def measure(silos: int, rounds: int, *, process_rounds: int) -> list[dict[str, Any]]:
    """The three executors on one MR-MTL plan of ``silos`` silos (``process_rounds`` on real processes; 0: none)."""
    from trainer.data.silos import load_silo_data
    from trainer.flower.cli import simulation_nodes
    from trainer.flower.client_app import build_client_app
    from trainer.flower.local import LocalFederation
    from trainer.flower.server_app import run_plan
    from trainer.flower.silo import _silo_workspace
    from trainer.flower.testing import LoopbackGrid
    from trainer.run.metrics import read_rounds
    from trainer.run.runner import TrainConfig, execute_run, prepare_run

    plan = _plan(silos, rounds)
    document = plan.model_dump(mode="json")
    config = TrainConfig(dataset="rotated_digits", model="mlp", model_options={"hidden": []}, rounds=rounds, lr=0.1,
                         strategy_options={"prox": 0.5})
    data = load_silo_data("rotated_digits", [s.num_samples for s in plan.silos], seed=0)
    rows = []
    with tempfile.TemporaryDirectory(prefix="gdpfed-bench-flower-silo-") as tmp:
        work = Path(tmp)
        load = _load()
        execute_run(prepare_run(plan, document, config, work / "sim", dataset=data), progress=_quiet(rounds))
        rows.append(_progress(silos, _row("gdpfed train", read_rounds(work / "sim" / "rounds.jsonl"), load)))

        run_config = _bundle(plan, config, work / "loopback" / "run", work / "loopback" / "app")
        nodes = simulation_nodes(plan, None, 0)
        grid = LoopbackGrid(build_client_app(work / "loopback" / "app"), {1 + i: n for i, n in enumerate(nodes)},
                            run_config)
        _silo_workspace.cache_clear()  # each node pays its data and model setup, as a fresh process does
        load = _load()
        run_plan(grid, document, run_config, dataset=data, progress=_quiet(rounds), log=lambda _text: None)
        rows.append(_progress(silos, _row("flower loopback", read_rounds(work / "loopback" / "run" / "rounds.jsonl"),
                                          load)))
        if process_rounds:
            short = config.model_copy(update={"rounds": process_rounds})
            _bundle(plan, short, work / "processes" / "run", work / "processes" / "app")
            load = _load()
            started = time.perf_counter()
            with LocalFederation(work / "processes" / "flower", nodes) as federation:
                code = federation.run(work / "processes" / "app", {"min-nodes": str(len(nodes))}, timeout_s=3600)
            if code != 0:
                raise RuntimeError(f"flwr run of the silo plan failed; see {work / 'processes' / 'flower'}")
            records = read_rounds(work / "processes" / "run" / "rounds.jsonl")
            row = _row("flower processes", records, load, run_wall_s=time.perf_counter() - started)
            rows.append(_progress(silos, row))
    for row in rows:
        row["vs_train"] = row["round_s"] / rows[0]["round_s"]
    return rows


def run(quick: bool) -> list[tuple[str, list[dict[str, Any]]]]:
    # a round on processes is one process start a silo (and discovery one): one round there
    sizes = [(2, 1, 1)] if quick else [(4, 3, 1), (10, 2, 1)]
    rows = [row for silos, rounds, process_rounds in sizes for row in measure(silos, rounds, process_rounds=process_rounds)]
    title = ("Silo plans (MR-MTL) on Flower vs gdpfed train: rotated_digits, linear model, 50 examples and batch 10 a "
             "silo, seconds per round (median of the rounds; vs_train = round_s / gdpfed train's)")
    return [(title, rows)]
