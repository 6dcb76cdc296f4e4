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
6. **Stated figures.** Every protected group's full-run ledger on the plan's mechanism is
   recomputed (``planner.ledger.epsilon_spent`` and ``figures_by_group``, independently of the
   figures the planner wrote; a group whose run the mechanism prices by Skellam events, a
   pool's ``discrete`` block under skellam, from the block; ``verify_executable(skellam_spent=)``
   hands those to the trainer's check of an earlier calibration's block): a Skellam-priced one must be
   within the budget, and no stated ``epsilon_spent``, ``epsilon_rdp`` or ``epsilon_tight``
   (where stated) may be below its recomputation, for every mechanism, nor a pool's
   ``discrete`` block's ``epsilon`` below its binding group's (the block's sampling_rate and
   clip_norm) under the block's accountant; a sampled group's
   stated ``epsilon_spent`` above the budget is refused unless the group says ``sound: false``
   (docs/ledger.md §5). ``gdpfed plan verify`` refuses a stated figure below its recomputation;
   ``gdpfed train`` runs such a plan (one an earlier release wrote: the continuous Gaussian's
   figures on a skellam plan, or a figure that release's pld computed lower in its last digits)
   with one warning, since its ledger counts the executed figure anyway.
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

from accounting.accountants import RDP_ACCOUNTANT, TIGHT_ACCOUNTANT
from accounting.errors import InvalidInputError
from planner import ledger as plan_ledger
from planner.adaptive_clip import check_adaptive_pools
from planner.ledger import EpsilonFn
from planner.schema import GroupPlan, Plan, check_scenario_fixed
from planner.secagg import check_stated_graph

# The planner's own verification slack (planner.finalize): rounding of JSON numbers only.
VERIFY_SLACK = 1e-9
_REL_TOL = 1e-9


def verify_executable(
    plan: Plan, *, epsilon_fn: EpsilonFn | None = None, understated: Literal["refuse", "report"] = "refuse",
    skellam_spent: dict[str, float] | None = None,
) -> list[UnderstatedFigure]:
    """Raise ``InvalidInputError`` unless ``plan`` is consistent and within every budget.

    A stated figure below its blocks' ledger (step 6) is refused (``understated="refuse"``, the
    plan checker's and the default) or returned (``"report"``: ``gdpfed train``, whose ledger
    counts the executed figure anyway and warns, docs/ledger.md §5); a budget the blocks
    overspend is refused either way. ``skellam_spent``, when given, receives step 6's
    group id -> full-run ledger on skellam (``epsilon_spent(plan, g, plan.rounds,
    mechanism="skellam")``) of each Skellam-priced group, with the default ``epsilon_fn`` only:
    the figures the trainer's check of a block an earlier calibration wrote needs for this very
    plan (``trainer.units.client.discrete.discrete_pools``; docs/ledger.md §5)."""
    check_scenario_fixed(plan)
    _check_structure(plan)
    _check_noise(plan)
    for group in plan.groups:
        plan_ledger.spent_history(plan, group)  # refuses an own phase other than the one run
    _check_privacy(plan, epsilon_fn)
    found = _check_stated_figures(plan, epsilon_fn, skellam_spent)
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
    """A group's stated figure below what its run spends over the plan's rounds (step 6):
    ``field`` (e.g. ``groups.medium.epsilon_spent``) states ``stated``; the run's ledger counts
    ``executed`` on ``mechanism`` under ``accountant``, spent by ``source`` (its pool's block or
    its Gaussian phases)."""

    group: str
    field: str
    stated: float
    executed: float
    mechanism: str
    accountant: str
    rounds: int
    source: str

    def reason(self) -> str:
        """What is wrong, in the words of the refusal (``InvalidInputError``'s message)."""
        return (
            f"states {self.stated:.12g}, below epsilon {self.executed:.12g} that {self.source} over the plan's "
            f"{self.rounds} rounds ({self.accountant}): the plan must state the figure of the mechanism it runs; "
            "re-plan it (gdpfed plan) to state it"
        )


def understated_warning(found: Sequence[UnderstatedFigure]) -> str:
    """The one warning of a run that executes a plan whose stated figures are below its run's
    ledger (a plan of an earlier release, docs/ledger.md §5): the groups, and the figure the
    run's ledger counts instead."""
    by_group: dict[str, list[UnderstatedFigure]] = {}
    for item in found:
        by_group.setdefault(item.group, []).append(item)
    named = "; ".join(_understated_part(g, items) for g, items in by_group.items())
    mechanism = found[0].mechanism
    return (
        f"the plan states group figures below what its {mechanism} run spends ({named}); the run meets every "
        f"budget, so it goes on and its ledger and summary count the {mechanism} figures (a plan written by an "
        "earlier release; re-plan it to state them, docs/ledger.md §5)"
    )


def _understated_part(group: str, items: list[UnderstatedFigure]) -> str:
    """One group's part of :func:`understated_warning`: the figure of record (``epsilon_spent``,
    what the ledger counts) where it is understated, else the comparison figure that is."""
    record = [item for item in items if item.field.endswith((".epsilon_spent", ".epsilon_planned"))]
    if record:
        return f"{group}: states {record[0].stated:.10g}, the ledger counts {record[0].executed:.10g}"
    item = items[0]
    name = item.field if ".discrete." in item.field else item.field.rsplit(".", 1)[1]  # a pool's block: its path
    return f"{group}: {name} states {item.stated:.10g}, recomputed {item.executed:.10g}"


def _check_stated_figures(plan: Plan, epsilon_fn: EpsilonFn | None,
                          skellam_spent: dict[str, float] | None = None) -> list[UnderstatedFigure]:
    """Step 6 (docs/ledger.md §5): every protected client group's full-run ledger on the plan's
    mechanism, recomputed from the fields the run uses, against its budget where Skellam events
    price it (the Gaussian phases' is step 4; ``InvalidInputError`` naming the group) and against
    every figure the plan states for it: the stated figures below it, one per field (empty: none).

    No stated ``epsilon_spent``, ``epsilon_rdp`` or ``epsilon_tight`` may be below its
    recomputation (relative ``VERIFY_SLACK``), whatever the mechanism; a figure left out (null:
    a hand-written plan, one without the rdp / tight figures) claims nothing and is not
    compared, nor computed. Nor may a pool's ``discrete`` block state an ``epsilon`` below the
    least recomputed figure, under the block's accountant, of the Skellam-priced groups it may
    have been calibrated for (its binding member: the block's sampling_rate and clip_norm).
    A sampled group's stated ``epsilon_spent`` above the budget is refused
    unless the group says ``sound: false`` (then step 4 says why); an exhausted group (rate 0)
    spends nothing more and states what its history spent. ``skellam_spent``: receives the
    Skellam-priced groups' figures (``verify_executable``)."""
    mechanism = plan.scenario.mechanism
    protected = [
        g for g in plan.groups if g.epsilon is not None and not plan_ledger.is_unprotected(plan, g, plan.rounds)
    ]
    for group in protected:
        assert group.epsilon is not None
        # a group this plan does not sample spends nothing more: an exhausted one may state the
        # history a re-plan accepted within its margin above the budget (planner.replan), truly
        if group.sampling_rate == 0:
            continue
        if group.sound and group.epsilon_spent is not None and group.epsilon_spent > group.epsilon * (1 + VERIFY_SLACK):
            raise InvalidInputError(
                f"groups.{group.id}.epsilon_spent",
                f"states {group.epsilon_spent:.12g}, above its budget {group.epsilon:g}, without sound: false",
            )
    priced = {g.id for g in protected if plan_ledger.counts_discrete(plan, g, mechanism)}
    # the figure of record is needed for a Skellam-priced group's budget and for any stated figure
    # (figures_by_group reuses it as the figure of its own accountant rather than composing again)
    needed = [g for g in protected if g.id in priced or _stated(g)]
    spent: dict[str, float | None] = {
        g.id: plan_ledger.epsilon_spent(plan, g, plan.rounds, epsilon_fn=epsilon_fn, mechanism=mechanism)
        for g in needed
    }
    for group in (g for g in needed if g.id in priced):
        value = spent[group.id]
        assert group.epsilon is not None and value is not None  # protected
        if value > group.epsilon * (1 + VERIFY_SLACK):
            raise InvalidInputError(
                f"groups.{group.id}",
                f"running this plan on {mechanism} spends epsilon {value:.10g} (its pool's discrete block, "
                f"{plan.rounds} rounds) above its budget {group.epsilon:g}",
            )
    if skellam_spent is not None and epsilon_fn is None:
        # the trainer's check of a block an earlier calibration wrote needs them again: composed once
        skellam_spent.update({g: value for g, value in spent.items() if g in priced and value is not None})
    binding = _binding_members(plan, [g for g in needed if g.id in priced])
    compared = [g.id for g in needed if g.epsilon_rdp is not None or g.epsilon_tight is not None
                or any(g.id in members for members in binding.values())]
    figures = plan_ledger.figures_by_group(plan, plan.rounds, spent, mechanism=mechanism, only=compared) if compared else {}
    found: list[UnderstatedFigure] = []
    for group in needed:
        if not _stated(group):
            continue
        record = plan_ledger.ledger_accountant(plan_ledger.history_accountant(plan, group, mechanism))
        both = figures.get(group.id)
        recomputed = (
            ("epsilon_spent", group.epsilon_spent, spent[group.id], record),
            ("epsilon_rdp", group.epsilon_rdp, None if both is None else both.rdp, RDP_ACCOUNTANT),
            ("epsilon_tight", group.epsilon_tight, None if both is None else both.tight, TIGHT_ACCOUNTANT),
        )
        for name, stated, value, accountant in recomputed:
            if stated is not None and value is not None and stated < value * (1 - VERIFY_SLACK):
                how = f"its pool's {mechanism} block spends" if group.id in priced else "its Gaussian phases spend"
                found.append(
                    UnderstatedFigure(group.id, f"groups.{group.id}.{name}", stated, value, mechanism, accountant,
                                      plan.rounds, how)
                )
    for pool_id, members in binding.items():
        block = plan.pool(pool_id).discrete
        assert block is not None  # _binding_members lists pools with blocks
        # the block states its binding member's figure under the block's accountant (pld, or rdp
        # for the rdp route): the least of the candidates' recomputed figures, so never a false refusal
        values = [(both.tight if block.accountant == TIGHT_ACCOUNTANT else both.rdp, g)
                  for g in members if (both := figures.get(g)) is not None]
        if not values:
            continue
        value, member = min(values)
        if block.epsilon < value * (1 - VERIFY_SLACK):
            found.append(UnderstatedFigure(member, f"pools.{pool_id}.discrete.epsilon", block.epsilon, value, mechanism,
                                           block.accountant, plan.rounds, f"group {member}'s Skellam events spend"))
    return found


def _binding_members(plan: Plan, priced: Sequence[GroupPlan]) -> dict[str, list[str]]:
    """Pool id -> the Skellam-priced groups its ``discrete`` block may have been calibrated for
    (its binding member: the block's sampling_rate and clip_norm), for each pool stating a block."""
    out: dict[str, list[str]] = {}
    for pool in plan.pools:
        block = pool.discrete
        if block is None:
            continue
        members = [g.id for g in priced if g.pool == pool.id and g.sampling_rate == block.sampling_rate
                   and g.clip_norm == block.clip_norm]
        if members:
            out[pool.id] = members
    return out


def _stated(group: GroupPlan) -> bool:
    """Whether the plan states any of the group's figures (a null one claims nothing)."""
    return any(value is not None for value in (group.epsilon_spent, group.epsilon_rdp, group.epsilon_tight))
