"""Re-planning (docs/planning.md §9): history composes, budgets hold, exhausted groups stop."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from accounting.errors import BudgetConflictError, InvalidInputError
from planner import Changes, make_plan, replan
from planner import ledger as plan_ledger
from planner.schema import SecaggMechanism
from tests.planner.conftest import independent_epsilon, worked_scenario


def assert_budgets(plan):
    for g in plan.groups:
        if g.epsilon is None or not g.phases or g.status != "active":
            continue
        assert sum(p.steps for p in g.phases) <= plan.scenario.rounds
        independent = independent_epsilon(g.phases, plan.scenario.delta, plan.accountant)
        assert independent <= g.epsilon * (1 + 2e-3), (g.id, independent)
        assert g.epsilon_spent <= g.epsilon * (1 + 1e-9)


def test_replan_composes_history_and_records_parent():
    parent = make_plan(worked_scenario(1))
    changes = Changes.model_validate(
        {"groups": [{"id": "g2", "epsilon": 3.0}, {"id": "new", "epsilon": 2.0, "num_clients": 60}]}
    )
    child = replan(parent, 40, changes, parent_plan_id="plan-1")
    assert child.parent_plan_id == "plan-1"
    assert child.start_round == 40 and child.rounds == 60
    g2 = child.group("g2")
    assert g2.spent_phase_count == 1 and g2.phases[0].steps == 40
    assert g2.phases[0].sampling_rate == parent.group("g2").sampling_rate
    assert g2.phases[1].steps == 60
    assert child.group("new").spent_phase_count == 0
    assert_budgets(child)
    grandchild = replan(child, 30, Changes(), parent_plan_id="plan-2")
    assert grandchild.start_round == 70 and grandchild.rounds == 30
    assert [p.steps for p in grandchild.group("g2").phases] == [40, 30, 30]
    assert_budgets(grandchild)


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_a_replan_without_changes_keeps_every_group_on_its_budget(accountant):
    """A tight (pld) history over-stated by rdp is no reason to stop a group: with 0.66 of its
    budget 1 spent by pld (1.15 by rdp), the strict group stays active and the re-plan's
    tables are not all infeasible for it (planner.replan._budget_status, planner.calibration.noise_table)."""
    parent = make_plan(worked_scenario(1, accountant=accountant))
    child = replan(parent, 40, Changes())
    for group in child.groups:
        assert group.status == "active" and group.sampling_rate > 0, group.id
        assert group.epsilon_spent >= 0.99 * group.epsilon  # the budget left is used
    assert_budgets(child)


def test_budget_below_spent_is_refused_and_equal_one_exhausts():
    """One rule (docs/planning.md §9): below the ledger's spent epsilon -> refused; equal -> exhausted."""
    parent = make_plan(worked_scenario(1))
    spent = plan_ledger.epsilon_spent(parent, parent.group("g1"), 80)
    assert spent is not None and 0.5 < spent
    with pytest.raises(BudgetConflictError, match=r"changes.groups.0.epsilon.*already spent epsilon") as info:
        replan(parent, 80, Changes.model_validate({"groups": [{"id": "g1", "epsilon": spent * 0.999}]}))
    assert info.value.code == "budget_conflict"
    child = replan(parent, 80, Changes.model_validate({"groups": [{"id": "g1", "epsilon": spent}]}))
    g1 = child.group("g1")
    assert g1.status == "exhausted" and g1.sampling_rate == 0
    assert len(g1.phases) == 1  # history kept, nothing new
    assert any("'g1'" in w and "spent" in w for w in child.warnings)
    total = sum(g.sampling_rate * g.num_clients for g in child.groups)
    assert total == pytest.approx(30, rel=1e-9)  # the others take over K
    assert_budgets(child)


def test_removed_group_and_rounds_change():
    parent = make_plan(worked_scenario(1))
    child = replan(parent, 50, Changes.model_validate({"groups": [{"id": "g4", "remove": True}], "rounds": 150}))
    assert child.group("g4").status == "removed" and child.group("g4").sampling_rate == 0
    assert child.rounds == 100 and child.scenario.rounds == 150
    assert_budgets(child)


def test_opted_out_group_cannot_opt_back_in_after_participating():
    scenario = worked_scenario(
        1,
        groups=[
            {"id": "a", "epsilon": 1.0, "num_clients": 100},
            {"id": "free", "epsilon": None, "num_clients": 100},
        ],
    )
    parent = make_plan(scenario, "gdpfed")
    with pytest.raises(BudgetConflictError, match="sampled without noise in 10 rounds"):
        replan(parent, 10, Changes.model_validate({"groups": [{"id": "free", "epsilon": 8.0}]}))
    # before it ran a round it may opt in
    assert replan(parent, 0, Changes.model_validate({"groups": [{"id": "free", "epsilon": 8.0}]})).group(
        "free").status == "active"
    # a group that stays opted out keeps counting its unprotected rounds
    child = replan(parent, 10, Changes.model_validate({"groups": [{"id": "a", "epsilon": 2.0}]}))
    assert child.group("free").unprotected_rounds == 10


def test_bad_rounds_done_and_changes_name_the_field():
    parent = make_plan(worked_scenario(1))
    with pytest.raises(InvalidInputError, match="rounds_done"):
        replan(parent, 101, Changes())
    with pytest.raises(InvalidInputError, match="rounds"):
        replan(parent, 100, Changes())
    with pytest.raises(InvalidInputError, match=r"changes\.groups\.0"):
        replan(parent, 10, Changes.model_validate({"groups": [{"id": "x", "epsilon": 1.0}]}))


def test_a_pld_plans_per_round_figure_is_its_own_never_above_the_budget():
    """The trainer's per-round log (ledger_accountant(per_round=True)) of a pld plan is pld's
    figure: rdp's stand-in showed the strict group of the worked example at 1.44 of its
    budget 1 after the last round (docs/ledger.md §3)."""
    plan = make_plan(worked_scenario(1, accountant="pld"))
    assert plan_ledger.ledger_accountant("pld", per_round=True) == "pld"
    assert plan_ledger.ledger_accountant("prv", per_round=True) == "rdp"  # prv's stays the fast stand-in
    for group in plan.groups:
        logged = plan_ledger.epsilon_spent(plan, group, plan.rounds, per_round=True)
        assert logged == plan_ledger.epsilon_spent(plan, group, plan.rounds) <= group.epsilon



# --- re-plans of a run on the discrete mechanism (docs/planning.md §9) -------------------


def skellam_parent():
    """A plan whose run executes skellam: each noised pool states its discrete block. The pools'
    continuous noise is larger than the budgets need, so the continuous record of a round (the
    Gaussian phase) spends less than the Skellam event that ran."""
    from planner.finalize import with_discrete
    from tests.trainer.trainer_plans import hand_plan

    plan = hand_plan(
        [("a", 3.0, 40, 0.5), ("b", 5.0, 30, 0.6)],
        [("pa", ["a"], 3.0, 6, 1.0), ("pb", ["b"], 3.0, 5, 1.0)],
        model_dim=610, rounds=4, dropout_rate=0.1,
    )
    plan = with_discrete(plan.model_copy(update={"scenario": plan.scenario.model_copy(update={"report_discrete": True})}))
    assert all(pool.discrete is not None for pool in plan.pools), plan.warnings
    return plan


def composed_skellam(plan, group):
    """Independently: the group's spent Skellam events then its block's event for the plan's rounds
    (its own sensitivities on the pool's grid), at delta less every wrap-around charge."""
    import accounting
    from accounting.events import PoissonSampledSkellam
    from planner.discrete import rounded_l1_bound, rounded_l2_bound

    block = plan.pool(group.pool).discrete
    l2 = rounded_l2_bound(group.clip_norm, block.scale, block.dimension)
    own = PoissonSampledSkellam(sampling_rate=group.sampling_rate, variance=block.total_variance, l2_sensitivity=l2,
                                l1_sensitivity=rounded_l1_bound(l2, block.dimension), steps=plan.rounds)
    delta = plan.scenario.delta - group.spent_wrap_probability - block.wrap_probability_run
    return accounting.epsilon_of_events([*group.spent_discrete, own], delta, plan.accountant).epsilon


def test_a_replan_of_a_skellam_run_records_its_skellam_events_and_calibrates_the_blocks_on_them():
    from planner.discrete import spent_record

    parent = skellam_parent()
    child = replan(parent, 2, {"groups": [{"id": "a", "epsilon": 4.0}]}, parent_plan_id="p")
    assert all(pool.discrete is not None for pool in child.pools if any(
        g.sampling_rate > 0 for g in child.groups if g.pool == pool.id)), child.warnings
    for group in child.groups:
        events, wrap = spent_record(parent, parent.group(group.id), 2)
        assert [e.steps for e in group.spent_discrete] == [2] and group.spent_discrete == events
        assert wrap == pytest.approx(2 * parent.pool(parent.group(group.id).pool).discrete.wrap_probability_per_round)
        assert group.spent_wrap_probability == wrap
        composed = composed_skellam(child, group)
        assert composed <= group.epsilon * (1 + 1e-9)  # never above the new budget
        assert composed >= group.epsilon * 0.99  # the least noise that meets it, not any noise
        assert child.pool(group.pool).discrete.epsilon == pytest.approx(composed, rel=1e-9)
    # a re-plan of the re-plan composes both plans' events, and both plans' wrap charges
    grandchild = replan(child, 1, {}, parent_plan_id="c")
    for group in grandchild.groups:
        assert [e.steps for e in group.spent_discrete] == [2, 1]
        block = child.pool(child.group(group.id).pool).discrete
        assert group.spent_wrap_probability == pytest.approx(
            child.group(group.id).spent_wrap_probability + block.wrap_probability_per_round)
        assert composed_skellam(grandchild, group) <= group.epsilon * (1 + 1e-9)


def test_a_budget_is_checked_against_the_skellam_events_a_skellam_run_spent():
    """After 2 of 4 rounds group a's Gaussian record says epsilon 1.20, the Skellam events that ran
    say 1.99: lowering its budget to 1.5 is refused with the Skellam figure (the continuous
    record under-counts the run)."""
    import accounting
    from planner.discrete import spent_record

    parent = skellam_parent()
    events, wrap = spent_record(parent, parent.group("a"), 2)
    skellam = accounting.epsilon_of_events(events, parent.scenario.delta - wrap, parent.accountant).epsilon
    gaussian = plan_ledger.epsilon_spent(parent, parent.group("a"), 2, per_round=False)
    assert gaussian < 1.5 < skellam
    with pytest.raises(BudgetConflictError) as refused:
        replan(parent, 2, {"groups": [{"id": "a", "epsilon": 1.5}]})
    assert refused.value.field == "changes.groups.0.epsilon"
    assert f"{skellam:.6g}" in refused.value.reason and "Skellam events" in refused.value.reason
    # at the Skellam figure itself the budget is accepted and the group is exhausted
    child = replan(parent, 2, {"groups": [{"id": "a", "epsilon": skellam}], "expected_clients": 15})
    assert child.group("a").status == "exhausted" and child.group("a").sampling_rate == 0


def test_a_replan_of_a_continuous_run_states_no_discrete_block():
    """A plan without blocks (its run is continuous) records Gaussian phases only: a successor
    asking for blocks gets none, saying why, rather than blocks calibrated on a record of
    another mechanism."""
    parent = skellam_parent()
    continuous = parent.model_copy(update={"pools": [p.model_copy(update={"discrete": None}) for p in parent.pools]})
    child = replan(continuous, 2, {}, parent_plan_id="p")
    assert all(pool.discrete is None for pool in child.pools)
    assert all(not g.spent_discrete for g in child.groups)
    assert any("no Skellam events record" in w for w in child.warnings), child.warnings


def planned_skellam_parent():
    """The planner's own skellam plan of the attached runs' scenario (pld, 4 rounds) with each block's
    noise 5% above what the planner calibrated (a block may carry more noise than its budget needs:
    before the lattice search, docs/accounting.md §13.5, the planner's own blocks did by about 5e-5):
    after 2 rounds group strict's Gaussian record (1.7532) is then above its Skellam events' figure
    (1.6520), well outside the re-plan's 1e-6 margin. The planner's blocks today sit on the
    continuous answer's lattice point at a smaller delta, so their Skellam record is the larger
    (``test_a_continuous_runs_budget_is_checked_against_its_gaussian_phases`` covers that order)."""
    from planner.schema import Scenario
    from tests.trainer.test_reporting import SCENARIO

    plan = make_plan(Scenario.model_validate({**SCENARIO, "rounds": 4}), "gdpfed_plus", clients_needed=False)
    assert all(pool.discrete is not None for pool in plan.pools), plan.warnings
    noisier = []
    for pool in plan.pools:
        block = pool.discrete
        assert block is not None
        noisier.append(pool.model_copy(update={"discrete": block.model_copy(update={
            "total_variance": block.total_variance * 1.05, "share_variance": block.share_variance * 1.05})}))
    return plan.model_copy(update={"pools": noisier})


def test_a_budget_is_checked_against_the_record_of_the_mechanism_the_run_reported():
    """Issue 27: the re-plan takes the run's mechanism. A skellam run's lowered budget that sits between
    its Skellam events' figure (what it spent, what its ledger counts) and the Gaussian record (what it
    did not run) is accepted, and the child stays within it; before, the larger record refused it.
    Unknown (``None``) keeps the larger record, a continuous run's is its Gaussian phases."""
    parent = planned_skellam_parent()
    strict = parent.group("strict")
    gaussian = plan_ledger.epsilon_spent(parent, strict, 2)
    skellam = plan_ledger.epsilon_spent(parent, strict, 2, mechanism="skellam")
    assert gaussian is not None and skellam is not None and skellam < gaussian * (1 - 1e-5), (skellam, gaussian)
    between = Changes.model_validate({"groups": [{"id": "strict", "epsilon": (skellam + gaussian) / 2}]})

    child = replan(parent, 2, between, mechanism="skellam")
    kept = child.group("strict")
    assert kept.epsilon is not None and kept.epsilon == (skellam + gaussian) / 2 and len(kept.spent_discrete) == 1
    assert (plan_ledger.epsilon_spent(child, kept, child.rounds, mechanism="skellam") or 0.0) <= kept.epsilon
    unknown_or_others: tuple[SecaggMechanism | None, ...] = (None, "gaussian_continuous")
    for unknown_or_other in unknown_or_others:
        with pytest.raises(BudgetConflictError) as refused:
            replan(parent, 2, between, mechanism=unknown_or_other)
        assert refused.value.field == "changes.groups.0.epsilon" and f"{gaussian:.6g}" in refused.value.reason
    # below the Skellam figure a skellam run's budget is refused, naming that figure
    with pytest.raises(BudgetConflictError) as refused:
        replan(parent, 2, Changes.model_validate({"groups": [{"id": "strict", "epsilon": skellam * 0.999}]}),
               mechanism="skellam")
    assert f"{skellam:.6g}" in refused.value.reason and "Skellam events" in refused.value.reason


def test_a_continuous_runs_budget_is_checked_against_its_gaussian_phases():
    """The other way round (``skellam_parent``: Gaussian 1.20 < 1.5 < Skellam 1.99 after 2 rounds): a run
    that reported gaussian_continuous spent the Gaussian phases, so 1.5 is accepted; unknown or skellam
    is refused. Skellam on a plan without blocks is refused naming secagg_mechanism."""
    parent = skellam_parent()
    lowered = Changes.model_validate({"groups": [{"id": "a", "epsilon": 1.5}], "expected_clients": 15})
    child = replan(parent, 2, lowered, mechanism="gaussian_continuous")
    assert child.group("a").epsilon == 1.5
    assert (plan_ledger.epsilon_spent(child, child.group("a"), child.rounds) or 0.0) <= 1.5 * (1 + 1e-9)
    others: tuple[SecaggMechanism | None, ...] = (None, "skellam")
    for mechanism in others:
        with pytest.raises(BudgetConflictError):
            replan(parent, 2, lowered, mechanism=mechanism)
    bare = parent.model_copy(update={"pools": [p.model_copy(update={"discrete": None}) for p in parent.pools]})
    with pytest.raises(InvalidInputError) as refused:
        replan(bare, 2, lowered, mechanism="skellam")
    assert refused.value.field == "secagg_mechanism"


def test_a_skellam_ledger_refuses_spent_phases_that_no_skellam_events_record():
    """Issue 27: ``planner.ledger.run_history`` priced spent Gaussian phases that no Skellam events
    record as those phases, before the group's events, on skellam. The planner never states a block
    then (a re-plan of a continuous run gets none), so only an edited plan got there: the ledger now
    refuses it naming the group's spent_discrete, and the service refuses the plan's first skellam
    report (check_mechanism) rather than count it. The continuous path still prices the phases."""
    child = replan(skellam_parent(), 2, Changes(), parent_plan_id="p")
    counted = plan_ledger.run_history(child, child.group("a"), 1, "skellam")
    assert len(counted) == 2 and counted[:1] == child.group("a").spent_discrete
    edited = child.model_copy(update={"groups": [
        g.model_copy(update={"spent_discrete": []}) if g.id == "a" else g for g in child.groups]})
    with pytest.raises(InvalidInputError) as refused:
        plan_ledger.run_history(edited, edited.group("a"), 1, "skellam")
    assert refused.value.field == "groups.a.spent_discrete" and "of 0 spent rounds" in refused.value.reason
    with pytest.raises(InvalidInputError) as refused:
        plan_ledger.epsilon_spent(edited, edited.group("a"), 1, mechanism="skellam")
    assert refused.value.field == "groups.a.spent_discrete"
    with pytest.raises(InvalidInputError) as reported:
        plan_ledger.check_mechanism(edited, "skellam")
    assert reported.value.field == "secagg_mechanism" and "groups.a.spent_discrete" in reported.value.reason
    plan_ledger.check_mechanism(child, "skellam")  # the planner's own re-plan is counted
    assert plan_ledger.run_history(edited, edited.group("a"), 1) == plan_ledger.group_history(edited, edited.group("a"), 1)


def test_a_skellam_child_exhausted_to_no_block_then_raised_keeps_its_spent_skellam_events():
    """The operator lowers every budget of a skellam run to what it spent (each group exhausted: the
    child has no noised pool, so no block), then raises them again. The child's run is still skellam
    (its scenario's mechanism), so the grandchild records the spent Skellam events and calibrates its
    blocks on them; before, "no block" read as a continuous run: the events were dropped and the
    grandchild stated no block (a skellam run refused it)."""
    import accounting
    from accounting.events import PoissonSampledSkellam
    from planner.discrete import rounded_l1_bound, rounded_l2_bound
    from planner.verify import verify_executable

    parent = skellam_parent()
    spent = plan_ledger.spent_by_group(parent, 2, mechanism="skellam")
    lowered = Changes.model_validate({"groups": [
        *({"id": gid, "epsilon": eps} for gid, eps in spent.items()),
        {"id": "public", "opt_out": True, "num_clients": 40},
    ]})
    child = replan(parent, 2, lowered, parent_plan_id="p", mechanism="skellam")
    assert child.scenario.secagg_mechanism == "skellam" and all(pool.discrete is None for pool in child.pools)
    assert {g.id: g.status for g in child.groups} == {"a": "exhausted", "b": "exhausted", "public": "active"}
    raised = Changes.model_validate({"groups": [{"id": "a", "epsilon": 3.0}, {"id": "b", "epsilon": 5.0}]})
    grandchild = replan(child, 1, raised, parent_plan_id="c", mechanism="skellam")
    assert verify_executable(grandchild) == []
    for gid in ("a", "b"):
        first, group = parent.group(gid), grandchild.group(gid)
        block = parent.pool(first.pool).discrete
        assert block is not None and grandchild.pool(group.pool).discrete is not None, grandchild.warnings
        # independently: the parent's block's event for the 2 rounds its run spent
        l2 = rounded_l2_bound(first.clip_norm, block.scale, block.dimension)
        ran = PoissonSampledSkellam(sampling_rate=first.sampling_rate, variance=block.total_variance, l2_sensitivity=l2,
                                    l1_sensitivity=rounded_l1_bound(l2, block.dimension), steps=2)
        assert group.spent_discrete == [ran]
        assert group.spent_wrap_probability == pytest.approx(2 * block.wrap_probability_per_round, rel=1e-12)
        own = grandchild.pool(group.pool).discrete
        assert own is not None
        l2 = rounded_l2_bound(group.clip_norm, own.scale, own.dimension)
        new = PoissonSampledSkellam(sampling_rate=group.sampling_rate, variance=own.total_variance, l2_sensitivity=l2,
                                    l1_sensitivity=rounded_l1_bound(l2, own.dimension), steps=grandchild.rounds)
        delta = parent.scenario.delta - 2 * block.wrap_probability_per_round - own.wrap_probability_run
        expected = accounting.epsilon_of_events([ran, new], delta, parent.accountant).epsilon
        ledger = plan_ledger.epsilon_spent(grandchild, group, grandchild.rounds, mechanism="skellam")
        assert ledger == pytest.approx(expected, rel=1e-9) and expected <= group.epsilon * (1 + 1e-9)  # type: ignore[operator]


@pytest.mark.parametrize("accountant", ["prv", "closed_form"])
def test_a_replan_of_a_prv_or_closed_form_skellam_plan_prices_its_skellam_events_as_its_ledger(accountant):
    """A prv or closed_form plan's blocks are calibrated by rdp (neither accounts the Skellam event): the
    re-plan priced the spent Skellam events with the plan's own accountant, so every re-plan of such a
    plan failed ('accountant prv does not support poisson_sampled_skellam events'). It now prices them as
    the ledger does (planner.ledger.history_accountant), the Gaussian phases by ledger_accountant, for
    every mechanism; a budget below the record of the run's mechanism is refused naming that figure."""
    from planner.schema import Scenario
    from tests.trainer.test_reporting import SCENARIO

    parent = make_plan(Scenario.model_validate({**SCENARIO, "rounds": 4, "accountant": accountant}), "gdpfed_plus",
                       clients_needed=False)
    assert all(pool.discrete is not None for pool in parent.pools), parent.warnings
    mechanisms: tuple[SecaggMechanism | None, ...] = (None, "skellam", "gaussian_continuous")
    for mechanism in mechanisms:
        child = replan(parent, 2, Changes(), mechanism=mechanism)
        assert child.start_round == 2 and [g.status for g in child.groups] == ["active", "active"]
        for group in child.groups:
            assert group.epsilon is not None and group.epsilon_spent is not None
            assert group.epsilon_spent <= group.epsilon * (1 + 1e-9)
    strict = parent.group("strict")
    skellam = plan_ledger.epsilon_spent(parent, strict, 2, mechanism="skellam")
    gaussian = plan_ledger.epsilon_spent(parent, strict, 2)
    assert skellam is not None and gaussian is not None
    for mechanism, spent in ((None, max(skellam, gaussian)), ("skellam", skellam), ("gaussian_continuous", gaussian)):
        with pytest.raises(BudgetConflictError) as refused:
            replan(parent, 2, Changes.model_validate({"groups": [{"id": "strict", "epsilon": spent * 0.999}]}),
                   mechanism=mechanism)
        assert refused.value.field == "changes.groups.0.epsilon" and f"{spent:.6g}" in refused.value.reason


def test_a_refusal_while_the_mechanism_is_unknown_says_so_and_how_to_give_it():
    """With the run's mechanism unknown the spent figure is the larger of the two records; the refusal said
    '(its Skellam events: the run executes the discrete mechanism)', which nobody had said. It names the
    larger-of rule, which record that is, and how to give the mechanism (--secagg-mechanism; the service
    once a round is reported). A skellam run's refusal keeps its text."""
    parent = skellam_parent()
    lowered = {"groups": [{"id": "a", "epsilon": 1.5}]}
    with pytest.raises(BudgetConflictError) as refused:
        replan(parent, 2, lowered)
    reason = refused.value.reason
    assert "the run executes the discrete mechanism" not in reason, reason
    assert "the larger of its Gaussian phases and its Skellam events, here its Skellam events" in reason
    assert "mechanism is unknown" in reason and "--secagg-mechanism" in reason and "once a round is reported" in reason
    with pytest.raises(BudgetConflictError) as known:
        replan(parent, 2, lowered, mechanism="skellam")
    assert "(its Skellam events: the run executes the discrete mechanism)" in known.value.reason


def _changes_replan_counted(monkeypatch: pytest.MonkeyPatch) -> tuple[str, int, list[int]]:
    """examples/changes.json's re-plan of examples/scenario.json after 40 rounds (the CLI test's):
    its output, the histories pld composed (each direction's call counts its histories) and, for
    each room question (planner.replan._room_left), the distinct histories it composed."""
    import accounting.accountants.pld as pld_module
    from planner.loading import load_scenario

    replan_module = importlib.import_module("planner.replan")  # the package's name is the function
    examples = Path(__file__).resolve().parents[2] / "examples"
    parent = make_plan(load_scenario(json.loads((examples / "scenario.json").read_text())))
    changes = json.loads((examples / "changes.json").read_text())
    composed = [0]
    asked: set[tuple[object, ...]] | None = None
    per_question: list[int] = []
    compose_many, room_left = pld_module.compose_many, replan_module._room_left

    def counting(histories, delta, direction):
        composed[0] += len(histories)
        if asked is not None:
            asked.update((tuple(map(tuple, h)), delta) for h in histories)
        return compose_many(histories, delta, direction)

    def room(*args, **kwargs):
        nonlocal asked
        asked = set()
        try:
            return room_left(*args, **kwargs)
        finally:
            per_question.append(len(asked))
            asked = None

    monkeypatch.setattr(pld_module, "compose_many", counting)
    monkeypatch.setattr(replan_module, "_room_left", room)
    out = replan(parent, 40, changes, parent_plan_id="p1").model_dump_json()
    return out, composed[0], per_question


def test_the_room_question_of_the_changes_replan_is_one_composition_at_the_cap(monkeypatch):
    """Issue 26 §2: whether a group has room left is pld's spent history and the new phase at the
    search's top sigma, composed once together (accounting.noise_multiplier_exists), not a whole
    noise-multiplier calibration (10 histories a question before): the same re-plan, bit for
    bit, as with the calibration's answer, for fewer compositions."""
    from accounting.accountants import get_accountant
    from accounting.accountants.base import Accountant

    out, composed, per_question = _changes_replan_counted(monkeypatch)
    assert per_question and all(count <= 2 for count in per_question), per_question
    monkeypatch.undo()
    # the calibration's answer to the same questions (what every other accountant asks)
    monkeypatch.setattr(type(get_accountant("pld")), "noise_multiplier_exists", Accountant.noise_multiplier_exists)
    calibrated, composed_calibrating, _ = _changes_replan_counted(monkeypatch)
    assert out == calibrated
    assert composed < composed_calibrating


def test_the_changes_replan_composes_each_spent_history_once_for_its_records_and_the_noise_table(monkeypatch):
    """A re-plan needs each group's spent Gaussian phases' epsilon for its budget checks (a changed
    budget against what was spent, the room left) and for the design's noise table (the budget left
    guides a pld plan's table, planner.calibration.noise_table): composed once, in planner/replan.py,
    and handed to the table through the problem (was 3 times for the group whose budget changed,
    twice for the others); the same re-plan bit for bit."""
    import accounting
    from planner.loading import load_scenario

    examples = Path(__file__).resolve().parents[2] / "examples"
    parent = make_plan(load_scenario(json.loads((examples / "scenario.json").read_text())))
    changes = json.loads((examples / "changes.json").read_text())
    before = replan(parent, 40, changes, parent_plan_id="p1").model_dump_json()
    spent = {g.id: plan_ledger.group_history(parent, g, 40) for g in parent.groups}
    spent = {gid: phases for gid, phases in spent.items() if phases}
    assert len(spent) >= 3 and any(c["id"] in spent and "epsilon" in c for c in changes["groups"])
    composed = dict.fromkeys(spent, 0)
    epsilon_of_events = accounting.epsilon_of_events

    def counted(events, delta, *args, **kwargs):
        for gid, phases in spent.items():
            if list(events) == list(phases) and delta == parent.scenario.delta:
                composed[gid] += 1
        return epsilon_of_events(events, delta, *args, **kwargs)

    monkeypatch.setattr(accounting, "epsilon_of_events", counted)
    child = replan(parent, 40, changes, parent_plan_id="p1")
    assert composed == dict.fromkeys(spent, 1), composed
    assert child.model_dump_json() == before


@pytest.mark.parametrize("accountant", ["pld", "prv"])
def test_a_compared_replans_ranking_problem_carries_no_spent_epsilons_of_the_plans_accountant(accountant):
    """A re-plan hands each group's spent epsilon, composed under the plan's accountant's
    verified_by, to the design's noise table (Problem.spent_epsilons); a compare plan ranks its
    methods on another accountant (tabulated_by: rdp for pld and prv), whose table must compose
    its own figures, not read the plan accountant's (docs/planning.md §9 point 4, §10)."""
    from planner.plan import _ranking_problem
    from planner.problem import build_problem

    scenario = worked_scenario().model_copy(update={"accountant": accountant})
    problem = build_problem(scenario, spent_epsilons=[0.5] * len(scenario.groups))
    ranking = _ranking_problem(problem)
    assert ranking.scenario.accountant == "rdp" and problem.spent_epsilon(0) == 0.5
    assert all(ranking.spent_epsilon(g) is None for g in range(ranking.n_groups))


def test_a_change_naming_a_group_twice_is_refused_not_read_as_its_last_entry():
    """``Changes`` refuses a group given twice (before, ``{"id": "g1", "epsilon": 2}`` then
    ``{"id": "g1", "epsilon": 3}`` re-planned g1 at 3 without a word), as silo and metric changes
    refuse a silo or group given twice; the error names the list, ``groups``."""
    import pydantic

    from accounting.errors import validation_error_line

    with pytest.raises(pydantic.ValidationError) as refused:
        Changes.model_validate({"groups": [{"id": "g1", "epsilon": 2.0}, {"id": "g1", "epsilon": 3.0}]})
    field, message = validation_error_line(refused.value.errors(include_url=False))
    assert field == "groups" and message == "group 'g1' is changed twice: give each group's change once"
    assert [g.id for g in Changes.model_validate({"groups": [{"id": "g1"}, {"id": "g2"}]}).groups] == ["g1", "g2"]
