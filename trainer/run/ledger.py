"""The privacy ledger of a run: each group's phases and the epsilon they add up to.

(docs/trainer.md §Rounds, "Privacy spent".) A client of group g in pool P is, in every
round, subject to one step of the Poisson(q_g)-subsampled Gaussian with multiplier
``sigma_g`` = the group's effective multiplier (pool noise std / the group's clip norm;
``sigma_P`` when all clips are equal). The ledger counts every round of the plan as a
step for every group, whether or not the group's pool aborted and whether or not the
client was sampled or dropped out: an abort releases nothing, so counting it can only
overstate the loss, never understate it. A group's full history is the spent phases of
the plan's parents (``GroupPlan.phases`` up to ``start_round``) followed by
``Phase(q_g, sigma_g, rounds run so far)``; epsilon comes from
``accounting.epsilon_of_phases`` under the plan's accountant and delta.

A group that is opted out (``epsilon: null``) or whose pool has no noise has no finite
epsilon: the ledger says ``None``. A group with ``sampling_rate`` 0 spends nothing more.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from accounting.errors import InvalidInputError
from accounting.mechanism import Phase
from planner.schema import GroupPlan, Plan

EpsilonFn = Callable[[Sequence[Phase], float, str], float]


def default_epsilon_fn(phases: Sequence[Phase], delta: float, accountant: str) -> float:
    """``accounting.epsilon_of_phases(phases, delta, accountant).epsilon``."""
    from accounting import epsilon_of_phases

    return float(epsilon_of_phases(list(phases), delta, accountant).epsilon)


def spent_history(group: GroupPlan, start_round: int) -> list[Phase]:
    """The phases of ``group`` that were spent before this plan: the prefix of
    ``group.phases`` whose steps add up to ``start_round``.

    The plan's own phase (if the planner listed it) follows that prefix and is dropped:
    the ledger adds this plan's rounds as they run.
    """
    history: list[Phase] = []
    steps = 0
    for phase in group.phases:
        if steps == start_round:
            break
        history.append(phase)
        steps += phase.steps
    if steps != start_round:
        raise InvalidInputError(
            f"groups.{group.id}.phases",
            f"the spent phases cover {steps} rounds but the plan starts at round {start_round}",
        )
    return history


def group_noise_multiplier(plan: Plan, group: GroupPlan) -> float:
    """The multiplier a client of ``group`` sees: effective (per-group clip) or the pool's."""
    if group.effective_noise_multiplier is not None:
        return float(group.effective_noise_multiplier)
    return float(plan.pool(group.pool).noise_multiplier)


class PrivacyLedger:
    """Epsilon spent per group after each round of a plan."""

    def __init__(self, plan: Plan, epsilon_fn: EpsilonFn | None = None) -> None:
        self.plan = plan
        self.delta = plan.scenario.delta
        self.accountant = plan.accountant
        self.epsilon_fn = epsilon_fn or default_epsilon_fn
        self.rounds_run = 0
        self._history = {g.id: spent_history(g, plan.start_round) for g in plan.groups}
        self._multiplier = {g.id: group_noise_multiplier(plan, g) for g in plan.groups}
        self._cache: dict[tuple[str, int], float | None] = {}

    def is_private(self, group: GroupPlan) -> bool:
        return group.epsilon is not None and self._multiplier[group.id] > 0

    def phases(self, group_id: str) -> list[Phase]:
        """The group's full history after the rounds run so far."""
        group = self.plan.group(group_id)
        phases = list(self._history[group_id])
        if self.rounds_run > 0 and group.sampling_rate > 0:
            phases.append(
                Phase(
                    sampling_rate=group.sampling_rate,
                    noise_multiplier=self._multiplier[group_id],
                    steps=self.rounds_run,
                )
            )
        return phases

    def record_round(self) -> None:
        self.rounds_run += 1

    def epsilon_spent(self, group_id: str) -> float | None:
        key = (group_id, self.rounds_run)
        if key not in self._cache:
            group = self.plan.group(group_id)
            if not self.is_private(group):
                self._cache[key] = None
            else:
                phases = self.phases(group_id)
                self._cache[key] = self.epsilon_fn(phases, self.delta, self.accountant) if phases else 0.0
        return self._cache[key]

    def spent(self) -> dict[str, float | None]:
        return {g.id: self.epsilon_spent(g.id) for g in self.plan.groups}

    def state_dict(self) -> dict[str, Any]:
        return {
            "rounds_run": self.rounds_run,
            "phases": {g.id: [p.model_dump() for p in self.phases(g.id)] for g in self.plan.groups},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rounds_run = int(state["rounds_run"])
        self._cache.clear()
        stored = state.get("phases", {})
        for group in self.plan.groups:
            mine = [p.model_dump() for p in self.phases(group.id)]
            if stored.get(group.id, mine) != mine:
                raise InvalidInputError(
                    "resume", f"the checkpoint's privacy history of group {group.id} does not match the plan"
                )
