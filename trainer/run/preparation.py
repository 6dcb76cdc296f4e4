"""What every unit's run preparation shares: the run's data, model, population (clients
dealt into the plan's groups) and registered strategy, each checked before anything is
written (docs/trainer.md §Runs, checkpoints and resume; §Clients and groups)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from accounting.errors import InvalidInputError
from trainer.data import assign_groups, clients_with_label, load_dataset
from trainer.engines import evaluate_clients
from trainer.models import build_model
from trainer.run.config import TrainConfig
from trainer.strategies.base import Population


def load_run_data(config: TrainConfig, total_clients: int) -> Any:
    """The run's dataset split into ``total_clients`` clients (``trainer.data.load_dataset``)."""
    return load_dataset(
        config.dataset, num_clients=total_clients, partition=config.partition, alpha=config.alpha, seed=config.seed,
        **config.dataset_options,
    )


def build_run_model(config: TrainConfig, dataset: Any) -> torch.nn.Module:
    """The run's model for ``dataset`` (on the CPU); bad options are ``InvalidInputError("model-option")``."""
    try:
        return build_model(config.model, dataset, seed=config.seed, **config.model_options)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, InvalidInputError):
            raise
        raise InvalidInputError("model-option", f"{config.model} cannot be built with {config.model_options}: {exc}") from None


def build_population(
    plan: Any, dataset: Any, seed: int, *, opt_out_assignment: str = "random", skewed_label: int = 7
) -> tuple[Population, list[str]]:
    """Deal the dataset's clients into the plan's groups (``trainer.data.assign_groups``),
    with warnings for the run; any plan whose ``groups`` have ``id`` and ``num_clients``
    (client and metric plans).

    ``skewed``: the groups that opted out in the scenario (``epsilon: null``; a
    ``dp_fedavg_all`` plan gives them an epsilon, but they are the same clients) are
    filled first with clients holding ``skewed_label``; when fewer clients hold it than
    those groups need, the rest are dealt at random and a warning says how many
    (docs/trainer.md §Clients and groups).
    """
    first: list[int] = []
    candidates = None
    warnings: list[str] = []
    if opt_out_assignment == "skewed":
        opted_out = {g.id for g in plan.scenario.groups if g.epsilon is None}
        first = [index for index, g in enumerate(plan.groups) if g.id in opted_out]
        if not first:
            raise InvalidInputError("opt_out_assignment", "skewed needs a group that opted out (epsilon null)")
        candidates = clients_with_label(dataset, skewed_label)
        wanted = sum(plan.groups[index].num_clients for index in first)
        if 0 < candidates.size < wanted:
            warnings.append(
                f"skewed opt-out: only {candidates.size} clients hold label {skewed_label} but the opted-out "
                f"groups have {wanted}; the other {wanted - candidates.size} were dealt at random"
            )
    labels = np.asarray(
        assign_groups([g.num_clients for g in plan.groups], dataset.num_clients, seed, first=first, candidates=candidates)
    )
    population = Population({g.id: np.flatnonzero(labels == index) for index, g in enumerate(plan.groups)})
    return population, warnings


def accuracy_by_group(model: torch.nn.Module, params: torch.Tensor, dataset: Any,
                      population: Population) -> dict[str, float | None]:
    """Group id -> mean over the group's clients of ``params``' accuracy on each client's own
    test rows (``trainer.engines.evaluate_clients``; ``None`` for a group without any)."""
    out: dict[str, float | None] = {}
    for group_id, clients in population.group_clients.items():
        out[group_id] = evaluate_clients(model, params, dataset, clients.tolist()).mean_accuracy() if clients.size else None
    return out
