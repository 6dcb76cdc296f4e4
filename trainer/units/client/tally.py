"""The client unit's tally of a run: how many rounds of the plan have run, and what they spent.

(docs/trainer.md §Rounds, "Privacy spent"; docs/ledger.md.) What a round costs each group
is ``planner.ledger``'s, the one module the service's ledger uses too; this class only
counts the rounds this run has executed, caches the per-round values, and checkpoints its
state. The per-round log uses ``planner.ledger.ledger_accountant(per_round=True)`` (rdp
for prv plans: an upper bound, about half a second cheaper per call); ``final_spent``,
the figure of record in ``summary.json``, uses the plan's own accountant exactly as the
service's ledger does.

Under the discrete mechanism (``secagg_mechanism="skellam"``) a round costs each group of a
noised pool the event its pool's stated block describes, the Poisson-subsampled Skellam
(``planner.discrete.group_event``), accounted at the plan's delta less each round's
wrap-around bound (``planner.discrete.run_delta``; docs/secure-aggregation.md §Discrete noise).
A run that followed a re-plan composes, first, the Skellam events its earlier plans spent
(``GroupPlan.spent_discrete``), at delta less their wrap-around charge too (docs/planning.md
§9). ``planner.ledger``'s functions take the run's mechanism, so the service's ledger of a
reported discrete run composes the very same events.
"""

from __future__ import annotations

import math
from typing import Any

from accounting.choices import SecaggMechanism
from accounting.errors import InvalidInputError
from accounting.events import PrivacyEvent
from planner import ledger as plan_ledger
from planner.ledger import EpsilonFn, same_history
from planner.schema import GroupPlan, Plan

__all__ = ["EpsilonFn", "ClientTally"]


class ClientTally:
    """Epsilon spent per group after each round of a plan."""

    privacy_unit = "client"
    notion = "client-level (epsilon, delta)-DP per group"
    population_change = "it changes the groups or their client counts (the simulator cannot re-deal clients mid-run)"

    def __init__(self, plan: Plan, epsilon_fn: EpsilonFn | None = None,
                 mechanism: SecaggMechanism = "gaussian_continuous") -> None:
        self.plan = plan
        self.mechanism = mechanism
        self.delta = plan.scenario.delta
        self.accountant = plan.accountant
        self.epsilon_fn = epsilon_fn or plan_ledger.default_epsilon_fn
        self.rounds_run = 0
        # Refuses a document whose own phases are not the mechanism it runs.
        for group in plan.groups:
            plan_ledger.spent_history(plan, group)
        self._cache: dict[tuple[str, int, bool], float | None] = {}

    def is_private(self, group: GroupPlan) -> bool:
        return not plan_ledger.is_unprotected(self.plan, group, 0) and (
            plan_ledger.effective_noise_multiplier(self.plan, group) > 0
        )

    def phases(self, group_id: str) -> list[PrivacyEvent]:
        """The group's full history after the rounds run so far, on the run's mechanism
        (``planner.ledger.run_history``)."""
        return plan_ledger.run_history(self.plan, self.plan.group(group_id), self.rounds_run, self.mechanism)

    def group_delta(self, group: GroupPlan) -> float:
        """The delta the group's history is accounted at: the plan's, less the discrete
        mechanism's wrap-around bound of every round run (``planner.ledger.history_delta``)."""
        return plan_ledger.history_delta(self.plan, group, self.rounds_run, self.mechanism)

    def record_round(self) -> None:
        self.rounds_run += 1

    def epsilon_spent(self, group_id: str, *, final: bool = False) -> float | None:
        """Epsilon of the group's history so far (``None``: no DP), through
        ``planner.ledger.epsilon_spent`` for the run's mechanism, as the service's ledger."""
        key = (group_id, self.rounds_run, final)
        if key not in self._cache:
            self._cache[key] = plan_ledger.epsilon_spent(
                self.plan,
                self.plan.group(group_id),
                self.rounds_run,
                per_round=not final,
                epsilon_fn=self.epsilon_fn,
                mechanism=self.mechanism,
            )
        return self._cache[key]

    def spent(self) -> dict[str, float | None]:
        """Per-round values (``ledger_accountant(per_round=True)``)."""
        return {g.id: self.epsilon_spent(g.id) for g in self.plan.groups}

    def final_spent(self) -> dict[str, float | None]:
        """Values under the plan's ledger accountant: the figure of record (summary, service)."""
        return {g.id: self.epsilon_spent(g.id, final=True) for g in self.plan.groups}

    def final_figures(self) -> dict[str, plan_ledger.EpsilonFigures | None]:
        """Each group's rdp and tight epsilon of its history so far (docs/ledger.md §3), beside
        the figure of record (``final_spent``)."""
        # the figure of record is one of the two (composed once) unless epsilon_fn is another's
        default = self.epsilon_fn is plan_ledger.default_epsilon_fn
        return plan_ledger.figures_by_group(self.plan, self.rounds_run, self.final_spent() if default else None,
                                            mechanism=self.mechanism)

    def targets(self) -> dict[str, float | None]:
        """Each group's budget, as the plan's scenario fixes it (None: opted out; docs/ledger.md §5)."""
        return {g.id: self.plan.scenario.group(g.id).epsilon for g in self.plan.groups}

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

    # following a re-plan (trainer.run.replan.FollowingTally; docs/ledger.md §6)

    @staticmethod
    def population(plan: Plan) -> list[tuple[str, int]]:
        """The plan's groups and their client counts."""
        return [(g.id, g.num_clients) for g in plan.groups]

    def history_problem(self, successor: Plan) -> str | None:
        """The first group whose spent history in ``successor`` is not what this run spent.

        On the continuous mechanism the successor's spent phases; on skellam (the run keeps
        the mechanism it resolved once, from the plan it started on) the successor's spent
        Skellam events and wrap-around charge (``GroupPlan.spent_discrete``,
        ``spent_wrap_probability``), and a ``discrete`` block on each of its noised pools,
        calibrated on that history (docs/planning.md §9). A successor without blocks is
        refused rather than run on the continuous shares: its budgets would be composed with
        a record of another mechanism.
        """
        if self.mechanism == "skellam":
            return self._discrete_history_problem(successor)
        for group in successor.groups:
            mine = self.phases(group.id)
            theirs = plan_ledger.group_history(successor, group, 0)
            if not same_history(mine, theirs):  # merges the phases of either
                return f"group {group.id}'s spent history {theirs} is not this run's {mine}"
        return None

    def _discrete_history_problem(self, successor: Plan) -> str | None:
        missing = plan_ledger.pools_without_block(successor)
        if missing:
            # the planner's own reason for leaving the block out, where it gave one
            why = "; ".join(w for w in successor.warnings if w.startswith("secagg_mechanism skellam:"))
            return "the re-plan's " + plan_ledger.missing_block_reason(missing[0]) + (f" ({why})" if why else "")
        for group in successor.groups:
            mine = self.phases(group.id)
            theirs = successor.group(group.id)
            if not same_history(mine, theirs.spent_discrete):
                return (
                    f"group {group.id}'s spent Skellam events {theirs.spent_discrete} are not this run's {mine}"
                )
            charged = float(self.delta) - self.group_delta(self.plan.group(group.id))
            if not math.isclose(charged, theirs.spent_wrap_probability, rel_tol=1e-9, abs_tol=1e-300):
                return (
                    f"group {group.id}'s spent wrap-around charge {theirs.spent_wrap_probability:.6g} is not this "
                    f"run's {charged:.6g}"
                )
        return None

    def continued(self, successor: Plan, epsilon_fn: EpsilonFn | None) -> ClientTally:
        """A fresh tally of ``successor``: its spent phases are this one's history, counted for
        the same mechanism (the engine keeps running it)."""
        return ClientTally(successor, epsilon_fn, mechanism=self.mechanism)

