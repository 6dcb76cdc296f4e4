"""The peer of ``gdpfed bench flower``: Flower's own plain ``FedAvg`` on the same data, model and training.

No privacy at all: Flower samples ``fraction_train`` of the nodes (a fixed number, not
per-group Poisson), each node trains exactly as a gdpfed node does
(``trainer.flower.training.local_update``: the same strategy, data, model, local steps
and minibatches) and replies with its model and its example count in plaintext (here 1,
so the average is the plain mean, as gdpfed's fixed denominator is); one message per node
per round and no secure aggregation, clipping or noise. The gap between this and a gdpfed
round on the same grid is what gdpfed's mechanism costs on Flower.

It runs from a gdpfed app directory whose two component modules point here
(``write_fedavg_bundle``), so the processes run read the same plan and run config.
The server writes the wall-clock time at the end of each round to
``OUT_DIR/fedavg_rounds.json`` (``evaluate_fn`` is called after every round).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

_SHIM = '''"""Flower's plain FedAvg on a gdpfed app directory (bench peer; bench/flower_fedavg.py)."""

from pathlib import Path

from bench.flower_fedavg import {builder}

app = {builder}(Path(__file__).resolve().parent.parent)
'''


def write_fedavg_bundle(out: Path, plan_document: dict[str, Any], run_config: dict[str, Any]) -> Path:
    """A gdpfed app directory (``trainer.flower.bundle``) whose ServerApp and ClientApp are the plain FedAvg ones."""
    from trainer.flower.bundle import PACKAGE, write_bundle

    write_bundle(out, plan_document, run_config)
    (out / PACKAGE / "server_app.py").write_text(_SHIM.format(builder="build_server_app"), encoding="utf-8")
    (out / PACKAGE / "client_app.py").write_text(_SHIM.format(builder="build_client_app"), encoding="utf-8")
    return out


def _plan_and_config(bundle_dir: Path, run_config: Any) -> tuple[dict[str, Any], Any]:
    from trainer.flower.settings import train_config

    return json.loads((bundle_dir / "plan.json").read_text(encoding="utf-8")), train_config(run_config)


def build_client_app(bundle_dir: Path) -> Any:
    """A node: trains from the global model it is sent and returns its new model with ``num-examples`` 1."""
    from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp

    app = ClientApp()

    @app.train()
    def train(message: Message, context: Context) -> Message:
        import numpy as np

        from trainer.flower.settings import NodeSettings
        from trainer.flower.training import local_update, workspace

        document, config = _plan_and_config(bundle_dir, context.run_config)
        node = NodeSettings.from_node_config(context.node_config)
        space = workspace(document, config, node.device)
        params = message.content.array_records["arrays"].to_numpy_ndarrays()[0].astype(np.float64)
        server_round = int(message.content.config_records["config"]["server-round"])  # type: ignore[arg-type, unused-ignore]
        update, _ = local_update(space, node.require_partition(), str(node.group), server_round - 1, params)
        reply = RecordDict({"arrays": ArrayRecord([params + update]), "metrics": MetricRecord({"num-examples": 1})})
        return Message(reply, reply_to=message)

    return app


def run_fedavg(grid: Any, plan_document: dict[str, Any], run_config: Any) -> list[float]:
    """``config.rounds`` rounds of Flower's ``FedAvg`` over ``grid``; the wall time of each round (s)."""
    import numpy as np
    from flwr.app import ArrayRecord, ConfigRecord
    from flwr.serverapp.strategy import FedAvg

    from planner.units import load_plan
    from trainer.engines.params import flatten_params
    from trainer.flower.settings import split_run_config, train_config
    from trainer.run.preparation import build_run_model, load_run_data

    plan = load_plan(plan_document)
    config = train_config(run_config)
    options, _ = split_run_config(run_config)
    total = plan.scenario.total_clients
    initial = flatten_params(build_run_model(config, load_run_data(config, total))).double().numpy()
    marks: list[float] = []

    def mark(_round: int, _arrays: Any) -> None:
        marks.append(time.perf_counter())

    strategy = FedAvg(
        fraction_train=plan.scenario.participation / total, fraction_evaluate=0.0, min_train_nodes=2,
        min_evaluate_nodes=0, min_available_nodes=total,
    )
    strategy.start(grid=grid, initial_arrays=ArrayRecord([np.asarray(initial)]), num_rounds=config.rounds,
                   train_config=ConfigRecord({"lr": config.lr}), evaluate_fn=mark)
    seconds = [b - a for a, b in zip(marks, marks[1:])]
    out = Path(options.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fedavg_rounds.json").write_text(json.dumps(seconds), encoding="utf-8")
    return seconds


def build_server_app(bundle_dir: Path) -> Any:
    """The ServerApp: ``run_fedavg`` on the deployment's grid."""
    from flwr.app import Context
    from flwr.serverapp import Grid, ServerApp

    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        document = json.loads((bundle_dir / "plan.json").read_text(encoding="utf-8"))
        run_fedavg(grid, document, context.run_config)

    return app
