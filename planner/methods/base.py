"""What a planning method is, and the small helpers every method shares (docs/planning.md §2).

A method returns a :class:`Design`: which groups share a pool, each group's rate, each
pool's keep ratio, each group's clip norm and how the pool's noise is set. The design is
turned into a plan (exact calibration, verification, secure aggregation) by
:mod:`planner.finalize`; nothing here is a privacy claim.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from planner.problem import AUTO, Problem
from planner.solve import ObjectiveConstants

NoiseRule = Literal["max", "scale", "none"]


@dataclass
class Design:
    """Pools, rates, keep ratios and clip norms chosen by a method (not yet calibrated)."""

    method: str
    pools: list[list[int]]
    rates: np.ndarray
    keep_ratios: list[float]
    clip_norms: np.ndarray
    noise_rule: NoiseRule = "max"
    history: list[float] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PlanningMethod:
    """One entry of the method registry (``planner.methods.METHODS``; docs/architecture.md §Registries).

    ``optimises_rates``: the group rates come out of a search (not the uniform K/N), so
    they can end at a bound and ``finalize`` says so. ``minimises_objective``: that search
    minimises the objective J (docs/planning.md §3, §4), so each private pool has the
    secure-aggregation floor of ``min_clients_per_pool`` and opted-out groups, which carry
    no noise, are the objective's favourites. ``prepare`` (optional) turns the problem into
    the one the method plans and ``finalize`` calibrates (``dp_fedavg_all`` makes opted-out
    groups private); without it the method plans the problem as given. ``in_comparison``
    false keeps a study-only baseline out of ``compare``'s table and recommendation.
    """

    name: str
    summary: str
    build: Callable[[Problem], Design]
    optimises_rates: bool = False
    minimises_objective: bool = False
    prepare: Callable[[Problem], Problem] | None = None
    in_comparison: bool = True


def uniform_rate(problem: Problem) -> float:
    """q = K / sum of active N_g (docs/planning.md §2: the uniform-rate methods)."""
    return problem.expected_clients / float(problem.num_clients[problem.active].sum())


def uniform_rates(problem: Problem) -> np.ndarray:
    return np.where(problem.active, uniform_rate(problem), 0.0)


def frozen_pools(problem: Problem) -> list[list[int]]:
    """Exhausted and removed groups: a pool of their own each, sampled at rate 0."""
    return [[int(g)] for g in np.flatnonzero(problem.frozen)]


def split_private(problem: Problem) -> tuple[list[int], list[list[int]]]:
    """(active private groups, one single-group pool per active opted-out group)."""
    private = [int(g) for g in np.flatnonzero(problem.active_private)]
    opted_out = [[int(g)] for g in np.flatnonzero(problem.active & ~problem.private)]
    return private, opted_out


def objective_constants(problem: Problem) -> ObjectiveConstants:
    s = problem.scenario
    return ObjectiveConstants(
        expected_clients=problem.expected_clients,
        model_dim=float(s.model_dim),
        update_norm_bound=s.objective_update_norm,
        sparsity_exponent=float(s.sparsity_exponent),
        bias_weight=float(s.bias_weight),
        min_keep_ratio=float(s.min_keep_ratio),
    )


def pool_keep_setting(problem: Problem, members: list[int]) -> tuple[float, str | None]:
    """A pool's keep ratio from its members' settings: auto if all are auto, else the
    smallest fixed one (more sparsification never adds noise), with a note if they differ."""
    settings = problem.keep_settings[members]
    fixed = settings[settings != AUTO]
    if fixed.size == 0:
        return AUTO, None
    value = float(fixed.min())
    note = None
    if len(set(settings.tolist())) > 1:
        names = ", ".join(problem.ids[g] for g in members)
        note = f"pool of {names}: members asked for different keep ratios; using {value:g}"
    return value, note
