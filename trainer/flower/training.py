"""A node's local training: the strategy's ``client_update`` for this one client (imports torch).

(docs/flower.md §2, step 1.) The node builds the same model, data and strategy as
``gdpfed train`` from the run's settings and runs ``strategy.client_update`` for its own
client index only. With the same seed this is exactly the row the simulator computes for
that client (minibatches are fixed by ``(seed, round, client)``, docs/trainer.md
"Minibatches"). A strategy's per-client state (a personal model) comes from and goes
back to the node's ``Context.state`` around each call (``client_state``), and
``client_scores`` scores the node's own model on its own test rows. Only the ClientApp's
``KEYS`` and ``PERSONAL`` steps import this module.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import torch

from accounting.errors import InvalidInputError
from trainer.strategies.base import RoundContext, Strategy


@dataclass(frozen=True)
class Workspace:
    """What a node builds once per process: data, model and the strategy."""

    plan: Any  # a client Plan, or a metric_local MetricPlan (trainer.flower.metric)
    config: Any  # TrainConfig
    strategy: Strategy
    dim: int
    device: torch.device


@lru_cache(maxsize=4)
def _workspace(plan_json: str, config_json: str, device: str) -> Workspace:
    # start-up time: a node loads torch and the model only for its first local update
    from planner.units import load_plan_document
    from trainer.device import choose_device
    from trainer.engines import LocalTrainingConfig, num_params
    from trainer.run.config import TrainConfig
    from trainer.run.preparation import build_run_model, load_run_data
    from trainer.units.strategies import registered_strategy

    plan: Any = load_plan_document(json.loads(plan_json))  # a client or metric plan (the registry refuses others)
    config = TrainConfig.model_validate_json(config_json)
    chosen = choose_device(device)
    dataset = load_run_data(config, plan.scenario.total_clients)
    model = build_run_model(config, dataset).to(chosen)
    local = LocalTrainingConfig(
        local_steps=config.local_steps, batch_size=config.batch_size, lr=config.lr, momentum=config.momentum
    )
    # the registry's strategy, as gdpfed train builds it (refused unless it runs this plan's unit)
    factory = registered_strategy(config, plan)
    built = factory(
        plan, model, dataset, engine=config.engine, local=local, device=chosen,
        server_lr=config.server_lr, server_momentum=config.server_momentum,
    )
    return Workspace(plan, config, built, num_params(model), chosen)


def workspace(plan_document: dict[str, Any], config: Any, device: str) -> Workspace:
    """The node's data, model and strategy (built once per process, cached by their settings)."""
    return _workspace(json.dumps(plan_document, sort_keys=True), config.model_dump_json(), device)


def _check(space: Workspace, client: int, global_params: np.ndarray) -> None:
    if global_params.shape != (space.dim,):
        raise InvalidInputError(
            "global_params", f"the server sent {global_params.shape[0]} parameters, the model has {space.dim}"
        )
    if not 0 <= client < space.plan.scenario.total_clients:
        raise InvalidInputError("partition-id", f"{client} is not a client index of the run's dataset")


@contextmanager
def client_state(space: Workspace, client: int, state: dict[str, np.ndarray]) -> Iterator[dict[str, np.ndarray]]:
    """The strategy holding ``client``'s state (``Strategy.load_client_state``) for the block;
    after it, the yielded dict holds the client's state as the strategy left it
    (``Strategy.client_state``), and the strategy holds none.

    The node, not the process, keeps a client's state (its ``Context.state``; a deployment
    starts a process per message, and in-process nodes share one cached strategy), so the
    strategy is emptied again whatever happens (docs/flower.md §2, "Per-client state").
    """
    strategy = space.strategy
    strategy.load_client_state(client, {key: torch.from_numpy(np.array(value)) for key, value in state.items()})
    after: dict[str, np.ndarray] = {}
    try:
        yield after
        after.update({key: value.detach().to("cpu").numpy() for key, value in strategy.client_state(client).items()})
    finally:
        strategy.load_client_state(client, {})


def local_update(space: Workspace, client: int, group_id: str, global_round: int, global_params: np.ndarray,
                 state: dict[str, np.ndarray] | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """This client's raw update ``Delta`` (float64 ``[d]``) from ``global_params``, and its
    per-client state after the round (``state``: before it; ``Strategy.client_state``)."""
    _check(space, client, global_params)
    ctx = RoundContext(round_index=global_round - space.plan.start_round, global_round=global_round,
                       seed=space.config.seed)
    params = torch.from_numpy(np.array(global_params)).to(space.device)
    with client_state(space, client, state or {}) as after:
        update = space.strategy.client_update(ctx, params, np.array([client]), [group_id])
    return np.asarray(update.detach().to("cpu", torch.float64).numpy()[0]), after


def client_scores(space: Workspace, client: int, global_params: np.ndarray,
                  state: dict[str, np.ndarray] | None = None) -> tuple[float, int, int] | None:
    """``(loss sum, correct, test rows)`` of this client's own model on its own test rows
    (``Strategy.score_clients``); ``None``: the strategy has no per-client model, or the
    run's data holds no per-client test rows."""
    _check(space, client, global_params)
    dataset = getattr(space.strategy, "dataset", None)
    if not getattr(dataset, "has_client_tests", False):
        return None
    params = torch.from_numpy(np.array(global_params)).to(space.device)
    with client_state(space, client, state or {}):
        scores = space.strategy.score_clients([client], params, dataset)
    if scores is None:
        return None
    return float(scores.loss_sum[0]), int(scores.correct[0]), int(scores.count[0])
