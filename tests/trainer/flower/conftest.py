"""Fixtures of the Flower scale-out tests: a plan bundle directory and grids of in-process nodes.

Skipped (with the reason) only where the ``flower`` extra is not installed; ``.ci/run``
installs it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("flwr", reason="the flower extra is not installed: pip install 'gdpfed[flower]'")

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")

from trainer.flower.client_app import NodeClient, build_client_app, plan_fingerprint  # noqa: E402
from trainer.flower.engine import FlowerRoundEngine, Membership  # noqa: E402
from trainer.flower.testing import LoopbackGrid  # noqa: E402


def write_plan_bundle(directory: Path, plan: Any) -> Path:
    """A directory with the plan as ``plan.json``: all a ClientApp reads from its bundle."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "plan.json").write_text(json.dumps(plan.model_dump(mode="json")), encoding="utf-8")
    return directory


def nodes_by_group(plan: Any, first_id: int = 1000) -> dict[int, dict[str, Any]]:
    """One node per client of the plan, group by group (node ids ascending)."""
    nodes: dict[int, dict[str, Any]] = {}
    node = first_id
    for group in plan.groups:
        for _ in range(group.num_clients):
            nodes[node] = {"gdpfed-group": group.id, "partition-id": node - first_id}
            node += 1
    return nodes


def random_updates(dim_scale: float = 0.05) -> Callable[..., np.ndarray]:
    """A local-update stand-in: a fixed random vector per (client, round), no torch."""

    def update(config: Any, client: int, group: str, global_round: int, params: np.ndarray) -> np.ndarray:
        return np.asarray(np.random.default_rng([client, global_round, 77]).normal(0, dim_scale, params.shape[0]))

    return update


def zero_updates(config: Any, client: int, group: str, global_round: int, params: np.ndarray) -> np.ndarray:
    return np.zeros(params.shape[0])


class Observed:
    """The privatised vector each node handed to secure aggregation, per round: (node, pool) -> vector."""

    def __init__(self) -> None:
        self.vectors: dict[tuple[int, str], np.ndarray] = {}

    def __call__(self, node: int, pool: str, vector: np.ndarray) -> None:
        self.vectors[(node, pool)] = vector.copy()


RUN_CONFIG = {"dataset": "digits", "model": "mlp", "rounds": 1, "seed": 0, "out-dir": "unused"}


def grid_engine(plan: Any, dim: int, tmp_path: Path, *, update: Callable[..., np.ndarray], nodes: Mapping[int, Any] | None = None,
                drop: Any = None, observed: Observed | None = None) -> tuple[LoopbackGrid, FlowerRoundEngine]:
    """A FlowerRoundEngine over in-process nodes running the real ClientApp with ``update`` as training."""
    import torch

    from trainer.units.client.strategies import PlanStrategy

    bundle = write_plan_bundle(tmp_path / "bundle", plan)
    client = NodeClient(bundle, local_update=update, observe=observed)
    grid = LoopbackGrid(build_client_app(bundle, client), nodes or nodes_by_group(plan), RUN_CONFIG, drop=drop)
    membership = Membership(grid, plan, plan_fingerprint(plan), timeout=5.0, log=lambda _text: None)
    # no model or data: the engine only samples, aggregates and steps (local updates are the stand-in's)
    strategy = PlanStrategy(plan, None, None, engine="loop", local=None, device=torch.device("cpu"))  # type: ignore[arg-type]
    engine = FlowerRoundEngine(grid, membership, plan, strategy, dim, log=lambda _text: None)
    engine.keep_received = True
    return grid, engine


@pytest.fixture
def make_grid_engine(tmp_path: Path) -> Callable[..., tuple[LoopbackGrid, FlowerRoundEngine]]:
    def make(plan: Any, dim: int, **options: Any) -> tuple[LoopbackGrid, FlowerRoundEngine]:
        return grid_engine(plan, dim, tmp_path, **options)

    return make
