"""A plan composes each distinct history once (issue 26 §2; docs/planning.md §8, §10).

Two restructurings of the planner's privacy questions, pinned here by what they must keep:

- a pld plan's verification takes a group's epsilon from its calibration's last evaluation
  when the group runs at exactly that sigma (``GroupCalibration.epsilon``): the figure must
  be the one a fresh verification computes, bit for bit, and the history is composed once;
- ``compare`` gives ``epsilon_rdp`` / ``epsilon_tight`` only to the plan it returns
  (``PendingFigures``): the figures must equal those of each group's history computed on
  its own, and the tight figure is computed for one plan, not for every method ranked.

The verification's figures are what a plan states on the continuous mechanism
(``secagg_mechanism: gaussian_continuous``, named below); a skellam plan (the default) states
its blocks' Skellam figures instead (docs/ledger.md §3, "What a plan states";
tests/planner/test_discrete_figures.py), each group's own history too.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import accounting
from accounting.accountants import AccountantName, pld
from planner import Changes, make_plan, replan
from planner import ledger as plan_ledger
from planner.schema import Plan, RequestedMethod, Scenario

EXAMPLES = Path(__file__).parents[2] / "examples"
SCENARIO = json.loads((EXAMPLES / "scenario.json").read_text())


def _scenario(**overrides: Any) -> Scenario:
    return Scenario.model_validate({**SCENARIO, **overrides})


def _continuous(**overrides: Any) -> Scenario:
    """The scenario on the continuous mechanism, whose plan states the verification's figures."""
    return _scenario(secagg_mechanism="gaussian_continuous", **overrides)


def _key(history: Any) -> tuple[tuple[float, float, int], ...]:
    return tuple((float(q), float(s), int(t)) for q, s, t in history)


@pytest.fixture
def pld_compositions(monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[tuple[tuple[float, float, int], ...], float]]:
    """How often pld composed each history at each delta: every composition, alone or in a
    batch, is a row of ``pld._epsilons_and_errors``. The delta is part of the question: the
    discrete blocks' calibration asks the same sigma again at delta less the wrap charge
    (docs/accounting.md §13.5, a lattice point both calibrations may land on)."""
    seen: Counter[tuple[tuple[tuple[float, float, int], ...], float]] = Counter()
    many = pld._epsilons_and_errors

    def counted(histories: Any, delta: float) -> Any:
        seen.update((_key(h), delta) for h in histories)
        return many(histories, delta)

    monkeypatch.setattr(pld, "_epsilons_and_errors", counted)
    return seen


def _final_histories(plan: Plan) -> dict[str, tuple[tuple[float, float, int], ...]]:
    return {
        g.id: _key((p.sampling_rate, p.noise_multiplier, p.steps) for p in g.phases)
        for g in plan.groups if g.epsilon_spent is not None and g.phases
    }


def _fresh(plan: Plan, accountant: AccountantName) -> dict[str, float]:
    private = [g for g in plan.groups if g.epsilon_spent is not None and g.phases]
    reports = accounting.epsilons_of_histories([list(g.phases) for g in private], plan.scenario.delta, accountant)
    return {g.id: float(r.epsilon) for g, r in zip(private, reports, strict=True)}


@pytest.mark.parametrize("method", ["gdpfed_plus", "gdpfed", "idp_scale", "dp_fedavg"])
def test_a_pld_plan_composes_each_final_history_once(method: RequestedMethod, pld_compositions: Counter) -> None:
    plan = make_plan(_scenario(accountant="pld"), method)
    finals = _final_histories(plan)
    assert finals
    for group_id, history in finals.items():
        # calibration (its last evaluation) or verification, never both; and no figure recomputes it
        assert pld_compositions[(history, plan.scenario.delta)] == 1, (method, group_id, pld_compositions)


@pytest.mark.parametrize("method", ["gdpfed_plus", "gdpfed", "idp_scale", "dp_fedavg"])
def test_a_reused_verification_is_the_fresh_one_bit_for_bit(method: RequestedMethod) -> None:
    """Groups at their calibrated sigma (reused) and groups above it (a pool's max rule:
    verified afresh) alike state what a fresh pld verification of their history gives."""
    plan = make_plan(_continuous(accountant="pld"), method)
    fresh = _fresh(plan, "pld")
    for group in plan.groups:
        if group.id in fresh:
            assert group.epsilon_spent == fresh[group.id] == group.epsilon_tight
            assert group.epsilon is not None and group.epsilon_spent <= group.epsilon * (1 + 1e-9)


def test_a_replanned_pld_plan_verifies_its_whole_history_as_before() -> None:
    """With spent phases the calibration's history is spent + the new phase: the reused
    epsilon is that whole history's, as a fresh verification gives it."""
    parent = make_plan(_continuous(accountant="pld"), "gdpfed_plus")
    child = replan(parent, 40, Changes.model_validate({"rounds": 120}))
    assert any(g.spent_phase_count for g in child.groups)
    fresh = _fresh(child, "pld")
    assert fresh
    for group in child.groups:
        if group.id in fresh:
            assert group.epsilon_spent == fresh[group.id]


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_compare_computes_the_figures_of_the_plan_it_returns_only(
    accountant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    figures = plan_ledger.epsilon_figures

    def counted(histories: Any, delta: float, known: Any = None) -> Any:
        calls.append(len(histories))
        return figures(histories, delta, known)

    monkeypatch.setattr(plan_ledger, "epsilon_figures", counted)
    plan = make_plan(_scenario(accountant=accountant), "compare")
    assert plan.comparison is not None and len(plan.comparison) > 2
    assert calls == [len(_final_histories(plan))]


@pytest.mark.parametrize("mechanism", ["gaussian_continuous", "skellam"])
@pytest.mark.parametrize("accountant", ["rdp", "pld"])
@pytest.mark.parametrize("method", ["compare", "gdpfed_plus", "gdpfed"])
def test_a_plans_figures_are_each_historys_own(accountant: str, method: RequestedMethod, mechanism: str) -> None:
    """The figures a plan states (verified or certified figure reused, distinct histories
    composed together) are each group's history's rdp and pld epsilon computed alone: its
    Gaussian phases on the continuous mechanism, its Skellam events at its delta on skellam."""
    plan = make_plan(_scenario(accountant=accountant, secagg_mechanism=mechanism), method)
    private = [g for g in plan.groups if g.epsilon_spent is not None and g.phases]
    assert private
    for group in private:
        history = plan_ledger.run_history(plan, group, plan.rounds, plan.scenario.mechanism)
        delta = plan_ledger.history_delta(plan, group, plan.rounds, plan.scenario.mechanism)
        assert (mechanism == "skellam") == (delta < plan.scenario.delta)
        alone = plan_ledger.epsilon_figures([history], delta)[0]
        assert (group.epsilon_rdp, group.epsilon_tight) == (alone.rdp, alone.tight)
        recorded = group.epsilon_rdp if accountant == "rdp" else group.epsilon_tight
        assert recorded == group.epsilon_spent


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_a_ledger_row_composes_its_history_once(accountant: str, pld_compositions: Counter) -> None:
    """The service's ledger rows and the run summary (docs/ledger.md §3): the figure of record
    is one of the row's two figures, reused, so a pld history is composed once per row."""
    from app.services.ledger import group_ledgers
    from trainer.units.client.tally import ClientTally

    plan = make_plan(_scenario(accountant=accountant), "gdpfed_plus")
    rounds = 60
    private = [g for g in plan.groups if not plan_ledger.is_unprotected(plan, g, rounds)]
    histories = {g.id: _key((p.sampling_rate, p.noise_multiplier, p.steps)
                            for p in plan_ledger.group_history(plan, g, rounds)) for g in private}
    alone = {g.id: plan_ledger.epsilon_figures([plan_ledger.group_history(plan, g, rounds)], plan.scenario.delta)[0]
             for g in private}
    pld_compositions.clear()
    rows = {row.id: row for row in group_ledgers(plan, rounds)}
    for group_id, history in histories.items():
        assert pld_compositions[(history, plan.scenario.delta)] == 1, (group_id, pld_compositions)
        row = rows[group_id]
        assert (row.epsilon_rdp, row.epsilon_tight) == (alone[group_id].rdp, alone[group_id].tight)
        assert row.epsilon_spent == (row.epsilon_tight if accountant == "pld" else row.epsilon_rdp)

    ledger = ClientTally(plan)
    for _ in range(rounds):
        ledger.record_round()
    pld_compositions.clear()
    figures = ledger.final_figures()
    spent = ledger.final_spent()
    for group_id, history in histories.items():
        assert pld_compositions[(history, plan.scenario.delta)] == 1, (group_id, pld_compositions)
        assert figures[group_id] == alone[group_id]
        assert spent[group_id] == (alone[group_id].tight if accountant == "pld" else alone[group_id].rdp)


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_a_sweep_composes_no_figure_and_records_the_same_designs(
    accountant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from planner.sweep import sweep

    scenario = _scenario(accountant=accountant)
    values = [0.5, 2.0]
    expected = []
    for value in values:
        groups = [g.model_copy(update={"epsilon": value}) if g.id == "strict" else g for g in scenario.groups]
        plan = make_plan(scenario.model_copy(update={"groups": groups}), "gdpfed_plus", clients_needed=False)
        expected.append(({g.id: g.sampling_rate for g in plan.groups}, plan.predicted.objective))
    calls: list[int] = []
    figures = plan_ledger.epsilon_figures

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return figures(*args, **kwargs)

    monkeypatch.setattr(plan_ledger, "epsilon_figures", counted)
    result = sweep(scenario, "strict", values)
    assert calls == []
    for i, (rates, objective) in enumerate(expected):
        assert {g: result.sampling_rates[g][i] for g in rates} == rates
        assert result.objective[i] == objective


def test_a_pld_plan_calibrates_its_groups_in_one_lockstep_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """pld answers every group's calibration together (accounting.noise_multipliers, the
    searches in lockstep); the sigmas are the ones each question gives alone, bit for bit."""
    scenario = _scenario(accountant="pld")
    alone = make_plan(scenario, "gdpfed_plus", clients_needed=False)
    calls: list[int] = []
    real = accounting.noise_multipliers

    def counted(questions: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(len(questions))
        return real(questions, *args, **kwargs)

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a pld group was calibrated on its own")

    monkeypatch.setattr(accounting, "noise_multipliers", counted)
    monkeypatch.setattr(accounting, "noise_multiplier", refused)
    together = make_plan(scenario, "gdpfed_plus", clients_needed=False)
    assert calls and max(calls) > 1  # several groups in one call
    assert [p.noise_multiplier for p in together.pools] == [p.noise_multiplier for p in alone.pools]
