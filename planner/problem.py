"""A scenario (plus re-planning state) as the arrays every method works on (docs/planning.md §1).

The pydantic :class:`~planner.schema.Scenario` is the external contract; this module turns it
into plain arrays once: budgets (NaN for opted-out groups), sizes, rate bounds, clip norms,
keep-ratio settings, the rounds this plan covers and each group's spent privacy history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from accounting.errors import InfeasibleError
from accounting.events import Phase
from planner.schema import Scenario

AUTO = -1.0  # keep-ratio setting meaning "auto" in the float array


@dataclass(frozen=True)
class Problem:
    """Normalised planning inputs; index g follows ``scenario.groups``."""

    scenario: Scenario
    ids: tuple[str, ...]
    epsilons: np.ndarray  # NaN = opted out
    num_clients: np.ndarray  # float, N_g
    min_rates: np.ndarray  # the groups' own min_sampling_rate
    clip_norms: np.ndarray  # C_g
    keep_settings: np.ndarray  # (0, 1] or AUTO
    rounds: int  # rounds this plan covers
    expected_clients: float  # K
    spent: tuple[tuple[Phase, ...], ...]  # each group's phases before this plan
    frozen: np.ndarray  # bool: sampled at rate 0 in this plan (exhausted or removed)
    notes: tuple[str, ...] = field(default=())
    # each group's spent phases' epsilon at delta under the accountant's verified_by, where the
    # caller composed it (a re-plan's records, planner.replan.SpentRecord); None: not composed.
    # The design's noise table reads it instead of composing the history again (docs/planning.md §9)
    spent_epsilons: tuple[float | None, ...] = field(default=())

    def spent_epsilon(self, g: int) -> float | None:
        """Group ``g``'s ``spent_epsilons`` entry; None where the caller gave none (docs/planning.md §9
        point 4)."""
        return self.spent_epsilons[g] if g < len(self.spent_epsilons) else None

    @property
    def n_groups(self) -> int:
        return len(self.ids)

    @property
    def private(self) -> np.ndarray:
        return ~np.isnan(self.epsilons)

    @property
    def active(self) -> np.ndarray:
        return ~self.frozen

    @property
    def active_private(self) -> np.ndarray:
        return self.private & self.active

    @property
    def has_spent(self) -> bool:
        return any(len(phases) > 0 for phases in self.spent)

    def label(self, g: int) -> str:
        eps = self.epsilons[g]
        budget = "opted out" if np.isnan(eps) else f"epsilon {eps:g}"
        return f"group {self.ids[g]!r} ({budget}, {int(self.num_clients[g])} clients)"


def build_problem(
    scenario: Scenario,
    *,
    rounds: int | None = None,
    spent: Sequence[Sequence[Phase]] | None = None,
    frozen: Sequence[bool] | None = None,
    spent_epsilons: Sequence[float | None] | None = None,
) -> Problem:
    """Arrays for ``scenario``; re-planning passes the remaining rounds, spent phases and frozen groups,
    and the spent phases' epsilons it composed (``Problem.spent_epsilons``).

    Raises :class:`InfeasibleError` when K exceeds the clients that may still be sampled
    (docs/planning.md §7).
    """
    groups = scenario.groups
    n = len(groups)
    epsilons = np.array([np.nan if g.epsilon is None else float(g.epsilon) for g in groups])
    num_clients = np.array([float(g.num_clients) for g in groups])
    min_rates = np.array([float(g.min_sampling_rate) for g in groups])
    clip_norms = np.array([float(g.clip_norm if g.clip_norm is not None else scenario.clip_norm) for g in groups])
    keep = []
    for g in groups:
        setting = g.keep_ratio if g.keep_ratio is not None else scenario.keep_ratio
        keep.append(AUTO if setting == "auto" else float(setting))
    frozen_mask = np.zeros(n, dtype=bool) if frozen is None else np.asarray(frozen, dtype=bool)
    spent_phases = tuple(tuple(p) for p in spent) if spent is not None else tuple(() for _ in groups)
    plan_rounds = int(scenario.rounds if rounds is None else rounds)
    k = scenario.participation
    available = float(num_clients[~frozen_mask].sum())
    if k > available * (1 + 1e-12):
        raise InfeasibleError(
            f"expected_clients K={k:g} exceeds the {available:g} clients that can be sampled "
            f"(sum of num_clients{' over active groups' if frozen_mask.any() else ''})"
        )
    return Problem(
        scenario=scenario,
        ids=tuple(g.id for g in groups),
        epsilons=epsilons,
        num_clients=num_clients,
        min_rates=min_rates,
        clip_norms=clip_norms,
        keep_settings=np.array(keep),
        rounds=plan_rounds,
        expected_clients=float(k),
        spent=spent_phases,
        frozen=frozen_mask,
        spent_epsilons=tuple(spent_epsilons) if spent_epsilons is not None else (),
    )
