"""The privacy ledger of a run: each group's phases and the epsilon they add up to.

(docs/trainer.md §Rounds, "Privacy spent".) A client of group g in pool P is, in every
round, subject to one step of the Poisson(q_g)-subsampled Gaussian with multiplier
``sigma_g`` = the group's effective multiplier (pool noise std / the group's clip norm;
``sigma_P`` when all clips are equal). The ledger counts every round of the plan as a
step for every group, whether or not the group's pool aborted and whether or not the
client was sampled or dropped out: an abort releases nothing, so counting it can only
overstate the loss, never understate it. A group's full history is the spent phases of
the plan's parents (``GroupPlan.phases[:spent_phase_count]``) followed by
``Phase(q_g, sigma_g, rounds run so far)``; epsilon comes from
``accounting.epsilon_of_phases`` (see ``PrivacyLedger.round_accountant`` for which
accountant) at the plan's delta.

A group that is opted out (``epsilon: null``), whose pool has no noise, or that was ever
sampled without noise (``unprotected_rounds``) has no finite epsilon: the ledger says
``None``. A group with ``sampling_rate`` 0 spends nothing more.
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
    """The phases of ``group`` spent under parent plans: ``phases[:spent_phase_count]``.

    What follows them is this plan's own phase ``Phase(q_g, sigma_g, plan.rounds)`` (if the
    group is sampled); the ledger adds this plan's rounds as they run, so it checks that
    the plan's own phase is what it will execute and refuses a plan where it is not.
    """
    history = list(group.phases[: group.spent_phase_count])
    own = group.phases[group.spent_phase_count :]
    sigma = group_noise_multiplier(plan, group)
    runs = group.sampling_rate > 0 and sigma > 0 and plan.rounds > 0
    if own:
        matches = (
            runs
            and len(own) == 1
            and math.isclose(own[0].sampling_rate, group.sampling_rate, rel_tol=1e-9)
            and math.isclose(own[0].noise_multiplier, sigma, rel_tol=1e-9)
            and own[0].steps == plan.rounds
        )
        if not matches:
            raise InvalidInputError(
                f"groups.{group.id}.phases",
                f"this plan's own phase {own} is not the one it runs (sampling_rate "
                f"{group.sampling_rate}, noise_multiplier {sigma}, {plan.rounds} rounds)",
            )
    elif runs and group.epsilon is not None:
        raise InvalidInputError(
            f"groups.{group.id}.phases", "lists no phase for this plan although the group is sampled with noise"
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
        phases.append(Phase(sampling_rate=group.sampling_rate, noise_multiplier=sigma, steps=self.rounds_run))
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
            unprotected = group.unprotected_rounds > 0 or any(p.noise_multiplier <= 0 for p in phases)
            if not self.is_private(group) or unprotected:
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
