"""The metric unit's tally of a run: each client's participations and leakage (docs/metric-privacy.md §4).

What one release leaks is ``planner.ledger``'s (``metric_client_leakage``: ``n / nu`` per
participation, added up by ``accounting.metric``); this class only counts who released
in which round, decides who may still be selected (the participation cap) and
checkpoints the counts. Its figures are metric leakages, never epsilons: ``spent`` maps
each group to the largest leakage of any of its clients so far.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import Any

import numpy as np

from accounting.errors import InvalidInputError
from planner import ledger as plan_ledger
from planner.ledger import EpsilonFigures
from planner.units import metric_local
from planner.units.metric_local import MetricGroupPlan, MetricPlan


class MetricTally:
    """Participations per client of a ``metric_local`` plan."""

    # the unit's labels, read by the run's summary, round records and plots as silo runs' are
    notion = metric_local.NOTION
    privacy_unit = metric_local.NAME
    population_change = "it changes the groups or their client counts (the simulator cannot re-deal clients mid-run)"

    def __init__(self, plan: MetricPlan, epsilon_fn: Any = None) -> None:
        del epsilon_fn  # no (epsilon, delta) accountant reads a metric plan
        self.plan = plan
        self.rounds_run = 0
        self.participations: dict[int, int] = {}
        self.group_of: dict[int, str] = {}
        # previous_round rule: per client, sum over its releases of r / r_t (r the reference
        # radius), so its leakage within r is that times n / nu (docs/metric-privacy.md §3.1)
        self.reference_releases: dict[int, float] = {}
        self.last_radius: float | None = None

    def _group(self, group_id: str) -> MetricGroupPlan:
        return self.plan.group(group_id)

    def eligible(self, group_id: str, clients: np.ndarray) -> np.ndarray:
        """The clients of ``group_id`` still under their participation cap (all without one)."""
        cap = self._group(group_id).max_participations
        if cap is None:
            return clients
        return np.array([c for c in clients.tolist() if self.participations.get(int(c), 0) < cap], dtype=clients.dtype)

    def record_participations(self, released: Iterable[tuple[int, str]], radius: float | None = None) -> None:
        """One release per ``(client, group)`` at the round's public ``radius`` (``None``:
        own_update); refuses a client past its cap (the engine selects only eligible
        clients, so this is a guard, never a clamp)."""
        adaptive = self.plan.scenario.radius_rule == "previous_round"
        if adaptive and radius is None:
            raise RuntimeError("a previous_round release needs its round's radius")
        self.last_radius = radius
        for client, group_id in released:
            cap = self._group(group_id).max_participations
            count = self.participations.get(client, 0) + 1
            if cap is not None and count > cap:
                raise RuntimeError(f"client {client} of group {group_id} would release {count} > its cap {cap} times")
            self.participations[client] = count
            self.group_of[client] = group_id
            if adaptive and radius is not None and self.plan.scenario.radius is not None:
                self.reference_releases[client] = self.reference_releases.get(client, 0.0) + self.plan.scenario.radius / radius

    def record_round(self) -> None:
        self.rounds_run += 1

    def client_leakage(self, client: int) -> float | None:
        """The client's total leakage (``None``: its group has no guarantee, nu = 0)."""
        group = self._group(self.group_of[client]) if client in self.group_of else None
        if group is None:
            return 0.0
        return plan_ledger.metric_client_leakage(
            self.plan.scenario.model_dim, group.noise_multiplier, self.participations.get(client, 0)
        )

    def spent(self) -> dict[str, float | None]:
        """Per group, the largest leakage of any of its clients so far (``None``: nu = 0)."""
        n = self.plan.scenario.model_dim
        result: dict[str, float | None] = {}
        for group in self.plan.groups:
            most = max((p for c, p in self.participations.items() if self.group_of[c] == group.id), default=0)
            result[group.id] = plan_ledger.metric_client_leakage(n, group.noise_multiplier, most)
        return result

    def targets(self) -> dict[str, float | None]:
        """No epsilon budgets: the leakage is not an epsilon (``summary``'s figures are)."""
        return {}

    def final_spent(self) -> dict[str, float | None]:
        return self.spent()

    def final_figures(self) -> dict[str, EpsilonFigures | None]:
        """None: a leakage is not an epsilon, so it has no rdp or tight figure."""
        return {}

    def summary(self) -> dict[str, float]:
        """Median and maximum leakage and participations over every client of the plan's
        private groups (never-sampled clients count as 0), as in the paper's Table 1."""
        leakages: list[float] = []
        counts: list[int] = []
        n = self.plan.scenario.model_dim
        for group in self.plan.groups:
            mine = [p for c, p in self.participations.items() if self.group_of[c] == group.id]
            mine += [0] * (group.num_clients - len(mine))
            counts += mine
            if group.leakage_per_participation is not None:
                leakages += [plan_ledger.metric_client_leakage(n, group.noise_multiplier, p) or 0.0 for p in mine]
        result = {
            "participations_median": float(statistics.median(counts)) if counts else 0.0,
            "participations_max": float(max(counts, default=0)),
        }
        if leakages:
            result["leakage_median"] = float(statistics.median(leakages))
            result["leakage_max"] = float(max(leakages))
        if self.plan.scenario.radius_rule == "previous_round":
            at_radius: list[float] = []
            for group in self.plan.groups:
                if group.leakage_per_participation is None:
                    continue
                scales = [v for c, v in self.reference_releases.items() if self.group_of[c] == group.id]
                scales += [0.0] * (group.num_clients - len(scales))
                at_radius += [v * group.leakage_per_participation for v in scales]
            if at_radius:
                result["leakage_at_radius_median"] = float(statistics.median(at_radius))
                result["leakage_at_radius_max"] = float(max(at_radius))
            if self.last_radius is not None:
                result["radius"] = float(self.last_radius)
        return result

    def state_dict(self) -> dict[str, Any]:
        return {
            "rounds_run": self.rounds_run,
            "participations": {str(c): [p, self.group_of[c]] for c, p in sorted(self.participations.items())},
            "reference_releases": {str(c): v for c, v in sorted(self.reference_releases.items())},
            "last_radius": self.last_radius,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rounds_run = int(state["rounds_run"])
        self.participations.clear()
        self.group_of.clear()
        for client, (count, group_id) in state["participations"].items():
            if group_id not in {g.id for g in self.plan.groups}:
                raise InvalidInputError("resume", f"the checkpoint's metric ledger names group {group_id!r}, not in the plan")
            self.participations[int(client)] = int(count)
            self.group_of[int(client)] = str(group_id)
        self.reference_releases = {int(c): float(v) for c, v in state.get("reference_releases", {}).items()}
        self.last_radius = state.get("last_radius")

    # following a re-plan (trainer.run.replan.FollowingTally; docs/metric-privacy.md §4)

    @staticmethod
    def population(plan: MetricPlan) -> list[tuple[str, int]]:
        """The plan's groups and their client counts."""
        return [(g.id, g.num_clients) for g in plan.groups]

    def history_problem(self, successor: MetricPlan) -> str | None:
        """Why ``successor`` cannot go on counting this run's releases: a re-plan moves
        leakage budgets, and with them participation caps, only. Another scenario besides
        the budgets (model size, clients a round, radius rule), another noise multiplier nu
        (the leakage ``n / nu`` of every release so far is the plan's), or a client that has
        already released more often than its group's new cap (its leakage is past the new
        budget) is refused."""
        budgets_only = {"groups"}
        if successor.scenario.model_dump(exclude=budgets_only) != self.plan.scenario.model_dump(exclude=budgets_only):
            return "it changes the scenario besides the groups' leakage budgets"
        for group in successor.groups:
            mine = self.plan.group(group.id).noise_multiplier
            if not math.isclose(group.noise_multiplier, mine, rel_tol=1e-12):
                return (f"group {group.id}'s noise multiplier is {group.noise_multiplier:.12g}, this run's "
                        f"{mine:.12g} (the leakage of the releases so far is this run's)")
            cap = group.max_participations
            most = max((p for c, p in self.participations.items() if self.group_of[c] == group.id), default=0)
            if cap is not None and most > cap:
                return (f"a client of group {group.id} has released {most} times, more than its new cap of {cap} "
                        f"(leakage budget {group.leakage_budget:g})")
        return None

    def continued(self, successor: MetricPlan, epsilon_fn: Any = None) -> MetricTally:
        """This ledger, on ``successor``: every client's releases so far are the run's (the
        new caps count them, docs/metric-privacy.md §4), the rounds run count from the
        successor's start. The same object: the metric engine caps participation on it."""
        del epsilon_fn  # no (epsilon, delta) accountant reads a metric plan
        self.plan = successor
        self.rounds_run = 0
        return self
