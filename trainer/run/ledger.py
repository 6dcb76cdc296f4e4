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

The ledger's phases are merged like the plan's: the parents' last phase and this plan's
are one phase when their (q, sigma) agree.

A group that is opted out (``epsilon: null``) or whose pool has no noise has no finite
epsilon: the ledger says ``None``. A group with ``sampling_rate`` 0 spends nothing more.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from accounting.errors import InvalidInputError
from accounting.mechanism import Phase
from planner.schema import GroupPlan, Plan

EpsilonFn = Callable[[Sequence[Phase], float, str], float]


def default_epsilon_fn(phases: Sequence[Phase], delta: float, accountant: str) -> float:
    """``accounting.epsilon_of_phases(phases, delta, accountant).epsilon``."""
    from accounting import epsilon_of_phases

    return float(epsilon_of_phases(list(phases), delta, accountant).epsilon)


def spent_history(plan: Plan, group: GroupPlan) -> list[Phase]:
    """The phases of ``group`` spent before this plan started.

    ``GroupPlan.phases`` is the full history: parents' phases, then this plan's own
    ``Phase(q_g, sigma_g, plan.rounds)``, possibly merged with an identical parent phase
    before it. This plan's rounds are removed from the end (the ledger adds them back as
    they run); a group this plan gives no phase (opted out, ``q_g = 0``) keeps them all.
    """
    phases = list(group.phases)
    sigma = group_noise_multiplier(plan, group)
    if not phases or group.sampling_rate <= 0 or sigma <= 0 or plan.rounds == 0:
        return phases
    last = phases[-1]
    if not (
        math.isclose(last.sampling_rate, group.sampling_rate, rel_tol=1e-9)
        and math.isclose(last.noise_multiplier, sigma, rel_tol=1e-9)
        and last.steps >= plan.rounds
    ):
        raise InvalidInputError(
            f"groups.{group.id}.phases",
            f"the last phase {last} is not this plan's (sampling_rate {group.sampling_rate}, "
            f"noise_multiplier {sigma}, {plan.rounds} rounds)",
        )
    earlier = last.steps - plan.rounds
    history = phases[:-1]
    if earlier > 0:
        history.append(last.model_copy(update={"steps": earlier}))
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
        self._history = {g.id: spent_history(plan, g) for g in plan.groups}
        self._multiplier = {g.id: group_noise_multiplier(plan, g) for g in plan.groups}
        self._cache: dict[tuple[str, int, bool], float | None] = {}

    def is_private(self, group: GroupPlan) -> bool:
        return group.epsilon is not None and self._multiplier[group.id] > 0

    def phases(self, group_id: str) -> list[Phase]:
        """The group's full history after the rounds run so far."""
        group = self.plan.group(group_id)
        phases = list(self._history[group_id])
        sigma = self._multiplier[group_id]
        if self.rounds_run == 0 or group.sampling_rate <= 0 or sigma <= 0:
            return phases
        current = Phase(sampling_rate=group.sampling_rate, noise_multiplier=sigma, steps=self.rounds_run)
        if phases and (phases[-1].sampling_rate, phases[-1].noise_multiplier) == (group.sampling_rate, sigma):
            current = current.model_copy(update={"steps": phases[-1].steps + self.rounds_run})
            phases.pop()
        phases.append(current)
        return phases

    def record_round(self) -> None:
        self.rounds_run += 1

    def round_accountant(self, phases: Sequence[Phase]) -> str:
        """The accountant of the per-round log: the plan's, except ``prv`` (about half a
        second per call, in a child process) and a multi-phase ``closed_form`` history
        (which that formula cannot describe) use ``rdp``. Every one of them is an upper
        bound on the true epsilon, so none is optimistic; ``final_spent`` uses the plan's."""
        if self.accountant == "prv" or (self.accountant == "closed_form" and len(phases) > 1):
            return "rdp"
        return self.accountant

    def epsilon_spent(self, group_id: str, *, final: bool = False) -> float | None:
        """Epsilon of the group's history so far (``None``: no DP for this group)."""
        key = (group_id, self.rounds_run, final)
        if key not in self._cache:
            group = self.plan.group(group_id)
            phases = self.phases(group_id)
            if not self.is_private(group) or any(p.noise_multiplier <= 0 for p in phases):
                self._cache[key] = None
            elif not phases:
                self._cache[key] = 0.0
            else:
                accountant = self.round_accountant(phases)
                if final and not (self.accountant == "closed_form" and len(phases) > 1):
                    accountant = self.accountant
                self._cache[key] = self.epsilon_fn(phases, self.delta, accountant)
        return self._cache[key]

    def spent(self) -> dict[str, float | None]:
        """Per-round values (see ``round_accountant``)."""
        return {g.id: self.epsilon_spent(g.id) for g in self.plan.groups}

    def final_spent(self) -> dict[str, float | None]:
        """Values under the plan's own accountant (for the run summary)."""
        return {g.id: self.epsilon_spent(g.id, final=True) for g in self.plan.groups}

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
