"""Verify that a plan document is safe to execute, whatever its origin (docs/ledger.md §5).

A plan reaches the trainer as a file or an HTTP response; either may have been edited by
hand or produced by another version. Before round 0 the trainer re-derives, from the
fields the round engine will actually use, every group's mechanism and checks it against
the group's budget with the plan's accountant. Nothing the planner wrote is trusted:

0. **Scenario.** Every field the plan's own scenario fixes (the rounds, the accountant,
   the groups, each group's epsilon, client count and clip norm) states the scenario's
   value (``planner.schema.check_scenario_fixed``), so the budgets below are the
   scenario's; delta is stated only there.
1. **Structure.** Every group is in exactly the pool it names, every pool lists only
   groups that name it, clip norms and rates are in range.
2. **Noise consistency.** For pool ``P`` the engine adds ``m_P`` shares of std ``s_P``
   at least (a pool releases only with ``>= m_P`` survivors), so the noise it releases
   has std ``>= sqrt(m_P) s_P``; that must cover ``noise_std_P`` (the ledger's figure),
   and ``noise_multiplier_P`` must be ``noise_std_P / C``. A group's
   ``effective_noise_multiplier`` must be ``noise_std_P / C_g``: the ledger composes the
   group with it (docs/ledger.md §1).
3. **Own phase.** The document's own phase for each group is the one it runs
   (``planner.ledger.spent_history``).
4. **Privacy.** Each private group that is sampled has
   ``epsilon(history after all rounds) <= epsilon_g (1 + 1e-9)`` under the ledger's
   accountant (rdp first; a prv plan whose rdp bound misses is checked with prv).
   Groups marked ``sound: false`` (a raw closed-form plan) are refused.
5. **Adaptive clipping.** With an ``adaptive_clip`` block every pool's
   ``count_noise_std`` (sigma_b) and ``update_noise_multiplier`` (sigma_Delta) are
   re-derived from the block and the pool's ``noise_multiplier`` (z_eff, what the ledger
   composes), ``sigma_b > z_eff / 2``, and every sampled group is clipped at the one
   scenario clip norm (docs/planning.md §15).
6. **Stated figures.** A group whose run the plan's mechanism prices by Skellam events (a
   pool's ``discrete`` block under skellam) has its full-run ledger recomputed from the
   block (``planner.ledger.epsilon_spent`` on that mechanism, independently of the figures
   the planner wrote): it must be within the budget, and the plan's ``epsilon_spent`` (and
   the ``epsilon_rdp`` / ``epsilon_tight`` of the same accountant), where stated, must not
   state less (docs/ledger.md §5). ``gdpfed plan verify`` refuses a stated figure below it;
   ``gdpfed train`` runs such a plan (one the previous release wrote, stating the continuous
   Gaussian's figures) with one warning, since its ledger counts the executed figure anyway.
7. **Secure-aggregation graph.** A pool's stated graph (full or SecAgg+ with k, t) is the
   one ``planner.secagg.secagg_graph`` derives for it (docs/secure-aggregation.md §SecAgg).

Any violation raises ``InvalidInputError`` naming the field, so ``gdpfed train`` exits 2
with one line and writes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from accounting.accountants import TIGHT_ACCOUNTANT
from accounting.errors import InvalidInputError
from planner import ledger as plan_ledger
from planner.adaptive_clip import check_adaptive_pools
from planner.ledger import EpsilonFn
from planner.schema import GroupPlan, Plan, check_scenario_fixed
from planner.secagg import check_stated_graph

# The planner's own verification slack (planner.finalize): rounding of JSON numbers only.
VERIFY_SLACK = 1e-9
_REL_TOL = 1e-9
# A stated figure is recomputed from the same events by the same code and JSON keeps every
# float exactly, so it may sit below the recomputation by round-off at most.
_STATED_TOL = 1e-12


def verify_executable(
    plan: Plan, *, epsilon_fn: EpsilonFn | None = None, understated: Literal["refuse", "report"] = "refuse"
) -> list[UnderstatedFigure]:
    """Raise ``InvalidInputError`` unless ``plan`` is consistent and within every budget.

    A stated figure below its blocks' ledger (step 6) is refused (``understated="refuse"``, the
    plan checker's and the default) or returned (``"report"``: ``gdpfed train``, whose ledger
    counts the executed figure anyway and warns, docs/ledger.md §5); a budget the blocks
    overspend is refused either way."""
    check_scenario_fixed(plan)
    _check_structure(plan)
    _check_noise(plan)
    for group in plan.groups:
        plan_ledger.spent_history(plan, group)  # refuses an own phase other than the one run
    _check_privacy(plan, epsilon_fn)
    found = _check_stated_figures(plan, epsilon_fn)
    if found and understated == "refuse":
        raise InvalidInputError(found[0].field, found[0].reason())
    if plan.scenario.adaptive_clip is not None:
        check_adaptive_pools(
            plan.scenario, plan.pools, {g.id: g.clip_norm for g in plan.groups if g.sampling_rate > 0}
        )
    for pool in plan.pools:
        check_stated_graph(pool, plan.scenario.dropout_rate, plan.scenario.abort_probability)
    return found


def _check_structure(plan: Plan) -> None:
    pools = {pool.id: pool for pool in plan.pools}
    if len(pools) != len(plan.pools):
        raise InvalidInputError("pools", "pool ids are not unique")
    member_of: dict[str, str] = {}
    for pool in plan.pools:
        for group_id in pool.groups:
            if group_id in member_of:
                raise InvalidInputError(f"pools.{pool.id}.groups", f"group {group_id!r} is also in pool {member_of[group_id]}")
            member_of[group_id] = pool.id
    ids = {group.id for group in plan.groups}
    for group in plan.groups:
        if group.pool not in pools:
            raise InvalidInputError(f"groups.{group.id}.pool", f"names pool {group.pool!r}, which the plan does not have")
        if member_of.get(group.id) != group.pool:
            raise InvalidInputError(
                f"groups.{group.id}.pool",
                f"says {group.pool!r} but pool {member_of.get(group.id)!r} lists the group: the document is inconsistent",
            )
        if not 0 <= group.sampling_rate <= 1:
            raise InvalidInputError(f"groups.{group.id}.sampling_rate", f"must be in [0, 1], got {group.sampling_rate}")
        if group.sampling_rate > 0 and not group.clip_norm > 0:
            raise InvalidInputError(f"groups.{group.id}.clip_norm", f"must be positive, got {group.clip_norm}")
    unknown = sorted(set(member_of) - ids)
    if unknown:
        raise InvalidInputError("pools", f"list groups the plan does not have: {unknown}")


def _check_noise(plan: Plan) -> None:
    clip = plan.scenario.clip_norm
    for pool in plan.pools:
        field = f"pools.{pool.id}"
        released = math.sqrt(pool.secagg_threshold) * pool.noise_share_std
        if released < pool.noise_std * (1 - _REL_TOL):
            raise InvalidInputError(
                f"{field}.noise_share_std",
                f"{pool.noise_share_std:.6g} x sqrt(secagg_threshold={pool.secagg_threshold}) releases std "
                f"{released:.6g} < the pool's noise_std {pool.noise_std:.6g}: the plan under-noises this pool",
            )
        if not math.isclose(pool.noise_multiplier, pool.noise_std / clip, rel_tol=_REL_TOL, abs_tol=1e-12):
            raise InvalidInputError(
                f"{field}.noise_multiplier",
                f"{pool.noise_multiplier:.6g} is not noise_std / clip_norm = {pool.noise_std / clip:.6g}: "
                "the document is inconsistent",
            )
        for group_id in pool.groups:
            group = plan.group(group_id)
            if group.effective_noise_multiplier is None or group.sampling_rate == 0:
                continue
            derived = pool.noise_std / group.clip_norm
            if not math.isclose(group.effective_noise_multiplier, derived, rel_tol=_REL_TOL, abs_tol=1e-12):
                raise InvalidInputError(
                    f"groups.{group.id}.effective_noise_multiplier",
                    f"{group.effective_noise_multiplier:.6g}, but pool {pool.id} adds noise_std "
                    f"{pool.noise_std:.6g} for clip norm {group.clip_norm:.6g}, i.e. {derived:.6g}: "
                    "the document is inconsistent",
                )


def _check_privacy(plan: Plan, epsilon_fn: EpsilonFn | None) -> None:
    unsound = [group.id for group in plan.groups if not group.sound]
    if unsound:
        raise InvalidInputError(
            "plan",
            f"group(s) {', '.join(unsound)} are marked sound: false (their noise multiplier misses "
            "its epsilon under rdp); re-plan without raw_closed_form to train",
        )
    for group in plan.groups:
        if group.epsilon is None or group.sampling_rate == 0:
            continue  # opted out (no DP claimed), or not sampled: this plan spends nothing
        sigma = plan_ledger.effective_noise_multiplier(plan, group)
        if plan.method != "nonprivate" and sigma <= 0:
            raise InvalidInputError(
                f"groups.{group.id}",
                f"has epsilon {group.epsilon:g} but is sampled without noise: the plan would not protect it",
            )
        if plan.method == "nonprivate":
            continue
        _check_group_budget(plan, group, epsilon_fn)


def _check_group_budget(plan: Plan, group: GroupPlan, epsilon_fn: EpsilonFn | None) -> None:
    assert group.epsilon is not None
    history = plan_ledger.group_history(plan, group, plan.rounds)
    compute = epsilon_fn or plan_ledger.default_epsilon_fn
    limit = group.epsilon * (1 + VERIFY_SLACK)
    accountant = plan_ledger.ledger_accountant(plan.accountant)
    # The fast sound accountant first (rdp); only a miss there costs the ledger's own (prv).
    screen = plan_ledger.ledger_accountant(plan.accountant, per_round=True)
    spent = float(compute(history, plan.scenario.delta, screen))
    if spent > limit and accountant != screen:
        spent = float(compute(history, plan.scenario.delta, accountant))
    if spent > limit:
        raise InvalidInputError(
            f"groups.{group.id}",
            f"running this plan spends epsilon {spent:.6g} (sampling_rate {group.sampling_rate:.6g}, "
            f"noise multiplier {plan_ledger.effective_noise_multiplier(plan, group):.6g}, {plan.rounds} rounds"
            f"{' after its spent phases' if group.spent_phase_count else ''}) above its budget {group.epsilon:g}",
        )


@dataclass(frozen=True)
class UnderstatedFigure:
    """A Skellam-priced group's stated figure below what its blocks spend over the plan's rounds
    (step 6): ``field`` (e.g. ``groups.medium.epsilon_spent``) states ``stated``; the run's
    ledger counts ``executed`` on ``mechanism`` under ``accountant``."""

    group: str
    field: str
    stated: float
    executed: float
    mechanism: str
    accountant: str
    rounds: int

    def reason(self) -> str:
        """What is wrong, in the words of the refusal (``InvalidInputError``'s message)."""
        return (
            f"states {self.stated:.12g}, below epsilon {self.executed:.12g} that its pool's {self.mechanism} block "
            f"spends over the plan's {self.rounds} rounds ({self.accountant}): the plan must state the figure of the "
            "mechanism it runs; re-plan it (gdpfed plan) to state it"
        )


def understated_warning(found: Sequence[UnderstatedFigure]) -> str:
    """The one warning of a run that executes a plan whose stated figures are below its blocks'
    ledger (a plan of a release that stated the continuous Gaussian's figures, docs/ledger.md §5):
    the groups, and the figure the run's ledger counts instead."""
    by_group: dict[str, UnderstatedFigure] = {}
    for item in found:
        by_group.setdefault(item.group, item)
    named = "; ".join(
        f"{g}: states {item.stated:.10g}, the ledger counts {item.executed:.10g}" for g, item in by_group.items()
    )
    mechanism = found[0].mechanism
    return (
        f"the plan states group figures below what its {mechanism} blocks spend ({named}); the blocks meet every "
        f"budget, so the run goes on and its ledger and summary count the {mechanism} figures (a plan written "
        "before the plans stated their mechanism's figures; re-plan it to state them, docs/ledger.md §5)"
    )


def _check_stated_figures(plan: Plan, epsilon_fn: EpsilonFn | None) -> list[UnderstatedFigure]:
    """Step 6: the Skellam-priced groups' recomputed full-run ledger against their budgets
    (``InvalidInputError`` naming the group) and against what the plan states: the stated
    figures below it, one per field (empty: none)."""
    mechanism = plan.scenario.mechanism
    found: list[UnderstatedFigure] = []
    for group in plan.groups:
        if not plan_ledger.counts_discrete(plan, group, mechanism) or group.epsilon is None:
            continue
        spent = plan_ledger.epsilon_spent(plan, group, plan.rounds, epsilon_fn=epsilon_fn, mechanism=mechanism)
        if spent is None:
            continue  # never protected: _check_privacy refuses what needs refusing
        field = f"groups.{group.id}"
        if spent > group.epsilon * (1 + VERIFY_SLACK):
            raise InvalidInputError(
                field,
                f"running this plan on {mechanism} spends epsilon {spent:.10g} (its pool's discrete block, "
                f"{plan.rounds} rounds) above its budget {group.epsilon:g}",
            )
        record = plan_ledger.record_accountant(plan, group, mechanism)
        # the comparison figure of the record's accountant is the same number (docs/ledger.md §3);
        # a figure the document leaves out (null: a hand-written plan, one without the rdp / tight
        # figures) claims nothing, so only a stated one is compared
        same = ("epsilon_tight", group.epsilon_tight) if record == TIGHT_ACCOUNTANT else ("epsilon_rdp", group.epsilon_rdp)
        for name, value in (("epsilon_spent", group.epsilon_spent), same):
            if value is not None and value < spent * (1 - _STATED_TOL):
                found.append(UnderstatedFigure(group.id, f"{field}.{name}", value, spent, mechanism, record, plan.rounds))
    return found
