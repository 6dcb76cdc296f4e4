"""planner.verify: a plan document is re-derived and checked before it is executed (docs/ledger.md §5).

Each tamper below is one a user met (issue 9 §4): a hand-edited plan file that ran with
exit 0. Every one must now be refused with one ``InvalidInputError`` naming the field.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from accounting.errors import InvalidInputError
from planner import make_plan
from planner.schema import PlanMethod, Scenario
from planner.units import load_plan
from planner.verify import verify_executable

SCENARIO = json.loads((Path(__file__).parents[2] / "examples" / "scenario.json").read_text())


def _document(method: str = "gdpfed_plus", **overrides: Any) -> dict[str, Any]:
    return make_plan(Scenario.model_validate({**SCENARIO, **overrides}), method).model_dump(mode="json")


@pytest.mark.parametrize("accountant", ["rdp", "closed_form"])
@pytest.mark.parametrize("method", typing.get_args(PlanMethod))
def test_every_planned_method_verifies(method: str, accountant: str) -> None:
    verify_executable(load_plan(_document(method, accountant=accountant)))


def _pool_noise(doc: dict[str, Any]) -> None:
    doc["pools"][0]["noise_std"] = 0.01
    doc["pools"][0]["noise_multiplier"] = 0.01
    doc["pools"][0]["noise_share_std"] = 0.01


def _rate(doc: dict[str, Any]) -> None:
    doc["groups"][0]["sampling_rate"] = 0.9
    doc["groups"][0]["phases"][-1]["sampling_rate"] = 0.9


def _target(doc: dict[str, Any]) -> None:
    # the scenario's budget with it: a group's alone is refused as not the scenario's (test_scenario_fixed.py)
    doc["groups"][0]["epsilon"] = doc["scenario"]["groups"][0]["epsilon"] = doc["groups"][0]["epsilon"] / 3


def _share(doc: dict[str, Any]) -> None:
    doc["pools"][0]["noise_share_std"] /= 2


def _moved(doc: dict[str, Any]) -> None:
    doc["groups"][0]["pool"] = doc["pools"][-1]["id"]


def _multiplier(doc: dict[str, Any]) -> None:
    doc["groups"][0]["effective_noise_multiplier"] *= 2
    doc["groups"][0]["phases"][-1]["noise_multiplier"] *= 2


def _own_phase(doc: dict[str, Any]) -> None:
    doc["groups"][0]["phases"][-1]["steps"] = 1


def _unsound(doc: dict[str, Any]) -> None:
    doc["groups"][0]["sound"] = False


def _sparse_graph(doc: dict[str, Any]) -> None:
    # A plan claiming a cheap SecAgg+ graph its pool's size does not support.
    doc["pools"][0].update(secagg_mode="sparse", secagg_neighbours=2, secagg_share_threshold=2)


@pytest.mark.parametrize(
    ("tamper", "field", "words"),
    [
        (_pool_noise, "groups.strict.effective_noise_multiplier", "inconsistent"),
        (_rate, "groups.strict", "above its budget"),
        (_target, "groups.strict", "above its budget"),
        (_share, "pools.P1.noise_share_std", "under-noises"),
        (_moved, "groups.strict.pool", "inconsistent"),
        (_multiplier, "groups.strict.effective_noise_multiplier", "inconsistent"),
        (_own_phase, "groups.strict.phases", "not the one it runs"),
        (_unsound, "plan", "sound: false"),
        (_sparse_graph, "pools.P1.secagg_mode", "inconsistent"),
    ],
)
def test_tampered_plans_are_refused(tamper: Callable[[dict[str, Any]], None], field: str, words: str) -> None:
    document = _document("gdpfed_plus")
    assert document["pools"][0]["groups"] == ["strict"] and len(document["pools"]) == 3
    verify_executable(load_plan(document))
    tamper(document)
    with pytest.raises(InvalidInputError) as info:
        verify_executable(load_plan(document))
    assert info.value.field == field and words in info.value.message


def test_overspending_replanned_history_is_refused() -> None:
    """A child plan whose spent phases are longer than the document claims overspends."""
    from planner import Changes, replan

    parent = make_plan(Scenario.model_validate(SCENARIO), "gdpfed_plus")
    child = replan(parent, 40, Changes())
    verify_executable(child)
    document = child.model_dump(mode="json")
    strict = next(g for g in document["groups"] if g["id"] == "strict")
    strict["phases"][0]["steps"] *= 3  # hides spent rounds
    with pytest.raises(InvalidInputError, match="above its budget"):
        verify_executable(load_plan(document))


def test_plans_without_a_stated_graph_still_verify() -> None:
    """Plans written before PoolPlan stated its secure-aggregation graph (fields null) pass."""
    document = _document("gdpfed_plus")
    for pool in document["pools"]:
        for key in [k for k in pool if k.startswith("secagg_") and k != "secagg_threshold"]:
            del pool[key]
    plan = load_plan(document)
    assert plan.pools[0].secagg_mode is None
    verify_executable(plan)


@pytest.mark.parametrize(
    ("edit", "field", "stated", "derived"),
    [
        ({"secagg_neighbours": 20}, "secagg_neighbours", "20", "32"),
        ({"secagg_share_threshold": 5}, "secagg_share_threshold", "5", "31"),
        ({"secagg_participants": 300, "secagg_neighbours": 20}, "secagg_participants", "300", "280"),
        ({"secagg_mode": "full"}, "secagg_mode", "'full'", "'sparse'"),
    ],
)
def test_an_edited_graph_names_the_first_field_that_differs(edit: dict[str, Any], field: str, stated: str,
                                                              derived: str) -> None:
    from types import SimpleNamespace

    from planner.secagg import check_stated_graph, secagg_graph

    graph = secagg_graph(280, 0.0, 1e-3)
    assert (graph.mode, graph.neighbours, graph.share_threshold) == ("sparse", 32, 31)
    pool = SimpleNamespace(
        id="P3", expected_clients=280.0, secagg_mode=graph.mode, secagg_participants=graph.num_clients,
        secagg_neighbours=graph.neighbours, secagg_share_threshold=graph.share_threshold,
        secagg_corrupt_fraction=graph.corrupt_fraction, secagg_dropout_fraction=graph.dropout_fraction,
    )
    check_stated_graph(pool, 0.0, 1e-3)  # as derived: accepted
    for name, value in edit.items():
        setattr(pool, name, value)
    with pytest.raises(InvalidInputError) as info:
        check_stated_graph(pool, 0.0, 1e-3)
    assert info.value.field == f"pools.P3.{field}"
    assert info.value.reason.startswith(f"states {stated}, but the pool's participants and bounds give {derived}"), info.value.reason


def test_an_edited_phase_is_refused_in_one_plain_sentence() -> None:
    """Issue 25 §4: a sampling rate edited without its phase named the phase as a Python repr."""
    document = _document("gdpfed_plus")
    document["groups"][0]["sampling_rate"] = 0.5
    with pytest.raises(InvalidInputError) as info:
        verify_executable(load_plan(document))
    assert info.value.field == "groups.strict.phases"
    phase = document["groups"][0]["phases"][-1]
    assert info.value.reason == (
        f"this plan's own phase (sampling_rate {phase['sampling_rate']:.12g}, noise_multiplier "
        f"{phase['noise_multiplier']:.12g}, 100 rounds) is not the one it runs (sampling_rate 0.5, "
        f"noise_multiplier {phase['noise_multiplier']:.12g}, 100 rounds)"
    )
    for repr_mark in ("PoissonSampledGaussian", "kind=", "[", "\n"):
        assert repr_mark not in info.value.message


# A plan written by `gdpfed plan` at 8f7b926, before pld became the default (its scenario file
# named no accountant, so rdp was chosen): no epsilon_rdp / epsilon_tight fields.
OLD_DEFAULT_PLAN = Path(__file__).parent / "data" / "plan-old-default-rdp.json"


def test_a_plan_of_the_old_default_still_reads_verifies_and_replans() -> None:
    from planner import Changes, replan

    document = json.loads(OLD_DEFAULT_PLAN.read_text())
    assert all("epsilon_rdp" not in g and "epsilon_tight" not in g for g in document["groups"])
    plan = load_plan(document)
    assert plan.accountant == plan.scenario.accountant == "rdp"
    assert all(g.epsilon_rdp is None and g.epsilon_tight is None for g in plan.groups)
    verify_executable(plan)  # the trainer's verification before round 0
    child = replan(plan, 40, Changes())
    assert child.accountant == "rdp"  # a re-plan keeps the plan's accountant
    verify_executable(child)
    for group in child.groups:
        assert group.epsilon_rdp is not None and group.epsilon_tight is not None
        assert group.epsilon_rdp == group.epsilon_spent and group.epsilon_tight <= group.epsilon_rdp



# A plan written by `gdpfed plan examples/scenario.json` at fe01b0e, before the distributed Skellam
# mechanism became the default: pld, no secagg_mechanism in its scenario, no discrete blocks.
OLD_CONTINUOUS_PLAN = Path(__file__).parent / "data" / "plan-old-default-continuous.json"


def test_a_plan_of_the_old_continuous_default_reads_as_what_it_ran_verifies_and_replans() -> None:
    """A plan document whose scenario names no secagg_mechanism ran the continuous Gaussian (the
    default when it was written): it must not read as today's default, skellam, whose blocks it
    does not state (docs/secure-aggregation.md §Discrete noise, "Old plans and scenarios")."""
    from planner import Changes, replan

    document = json.loads(OLD_CONTINUOUS_PLAN.read_text())
    assert "secagg_mechanism" not in document["scenario"] and all("discrete" not in p for p in document["pools"])
    plan = load_plan(document)
    assert plan.scenario.secagg_mechanism == plan.scenario.mechanism == "gaussian_continuous"
    assert all(pool.discrete is None for pool in plan.pools)
    verify_executable(plan)
    # written again, it states the mechanism it runs, and reads back the same
    rewritten = json.loads(plan.model_dump_json())
    assert rewritten["scenario"]["secagg_mechanism"] == "gaussian_continuous"
    assert load_plan(rewritten) == plan
    child = replan(plan, 40, Changes())
    assert child.scenario.secagg_mechanism == "gaussian_continuous" and all(p.discrete is None for p in child.pools)
    assert not any("secagg_mechanism" in w for w in child.warnings)
    verify_executable(child)
    # an old plan that asked for the blocks (report_discrete: true, the old spelling) runs skellam
    asked = {**document, "scenario": {**document["scenario"], "report_discrete": True}}
    assert load_plan(asked).scenario.mechanism == "skellam"


# `gdpfed plan examples/scenario.json` at 99ba0bd: blocks (secagg_mechanism: skellam), and the
# groups' figures the continuous Gaussian's, up to ~1e-7 relative below the blocks' ledger.
OLD_SKELLAM_PLAN = Path(__file__).parent / "data" / "plan-skellam-gaussian-figures.json"


def test_an_old_skellam_plans_understated_figures_are_refused_by_the_checker_and_reported_to_the_trainer(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The plan checker (``understated="refuse"``, ``gdpfed plan verify``) refuses the first stated
    figure below the blocks' ledger, naming the field, with the re-plan hint; the trainer's mode
    (``"report"``) returns every such figure with the ledger's, the one computation of both."""
    from app.cli import run
    from planner import ledger as plan_ledger

    plan = load_plan(json.loads(OLD_SKELLAM_PLAN.read_text()))
    assert plan.scenario.mechanism == "skellam" and all(p.discrete is not None for p in plan.pools)
    found = verify_executable(plan, understated="report")
    assert found
    for item in found:
        group = plan.group(item.group)
        name = item.field.rsplit(".", 1)[1]
        assert item.stated == getattr(group, name) < item.executed
        if name != "epsilon_rdp":  # the pld figure of record; epsilon_rdp is its rdp comparison
            assert item.executed == plan_ledger.epsilon_spent(plan, group, plan.rounds, mechanism="skellam")
            assert group.epsilon is not None and item.executed <= group.epsilon
    assert {"epsilon_spent", "epsilon_tight"} <= {item.field.rsplit(".", 1)[1] for item in found}  # pld
    with pytest.raises(InvalidInputError) as refused:
        verify_executable(plan)
    assert refused.value.field == found[0].field and "re-plan it" in refused.value.message
    assert run(["plan", "verify", str(OLD_SKELLAM_PLAN)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"{OLD_SKELLAM_PLAN}: {found[0].field}: states " in err
    assert "re-plan it" in err


def test_verification_hands_over_each_skellam_priced_groups_full_run_ledger_when_asked() -> None:
    """``verify_executable(skellam_spent=)`` receives step 6's full-run ledger on skellam of every
    Skellam-priced group, the figure ``epsilon_spent(..., mechanism="skellam")`` gives, for the
    trainer's check of a block an earlier calibration wrote (docs/ledger.md §5); none under another
    ``epsilon_fn`` (not the check's figure) nor on a continuous plan (none is Skellam-priced)."""
    from planner import ledger as plan_ledger

    plan = load_plan(json.loads(OLD_SKELLAM_PLAN.read_text()))
    figures: dict[str, float] = {}
    verify_executable(plan, understated="report", skellam_spent=figures)
    assert figures and figures == {
        g.id: plan_ledger.epsilon_spent(plan, g, plan.rounds, mechanism="skellam")
        for g in plan.groups if g.epsilon is not None and g.sampling_rate > 0
    }
    other: dict[str, float] = {}
    verify_executable(plan, understated="report", epsilon_fn=plan_ledger.default_epsilon_fn, skellam_spent=other)
    continuous: dict[str, float] = {}
    verify_executable(load_plan(_document(secagg_mechanism="gaussian_continuous")), skellam_spent=continuous)
    assert other == {} and continuous == {}


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
@pytest.mark.parametrize("mechanism", ["gaussian_continuous", "skellam"])
def test_every_stated_figure_of_every_group_is_checked_against_its_recomputation(mechanism: str, accountant: str) -> None:
    """Step 6 for every mechanism: a group's stated epsilon_spent, epsilon_rdp or epsilon_tight edited
    down by 1e-8 relative (beyond VERIFY_SLACK) is refused naming groups.<id>.<field>; before, only
    Skellam-priced groups were checked and only their epsilon_spent and their record's comparison figure,
    so a continuous plan could state any smaller figure. A figure left null claims nothing; a stated
    epsilon_spent above the budget is refused (the group does not say sound: false)."""
    document = _document(accountant=accountant, secagg_mechanism=mechanism)
    verify_executable(load_plan(document))
    for field in ("epsilon_spent", "epsilon_rdp", "epsilon_tight"):
        for index, group in enumerate(document["groups"]):
            assert group[field] is not None, (group["id"], field)
            edited = json.loads(json.dumps(document))
            edited["groups"][index][field] = group[field] * (1 - 1e-8)
            with pytest.raises(InvalidInputError) as refused:
                verify_executable(load_plan(edited))
            assert refused.value.field == f"groups.{group['id']}.{field}", refused.value.message
            assert "below epsilon" in refused.value.message
            edited["groups"][index][field] = None  # claims nothing
            verify_executable(load_plan(edited))
    above = json.loads(json.dumps(document))
    above["groups"][0]["epsilon_spent"] = above["groups"][0]["epsilon"] * (1 + 1e-6)
    with pytest.raises(InvalidInputError) as refused:
        verify_executable(load_plan(above))
    assert refused.value.field == f"groups.{above['groups'][0]['id']}.epsilon_spent"
    assert "above its budget" in refused.value.message


def test_an_exhausted_group_stating_its_history_above_a_budget_within_the_replan_margin_verifies() -> None:
    """A re-plan accepts a budget within its margin (1e-6 relative) below what was spent and exhausts the
    group (rate 0): the child truly states the history's figure, a little above the budget; the plan spends
    nothing more for it, so it verifies (gdpfed train runs it)."""
    from planner import Changes, replan
    from planner import ledger as plan_ledger
    from tests.planner.conftest import worked_scenario

    parent = make_plan(worked_scenario(1))
    spent = plan_ledger.epsilon_spent(parent, parent.group("g1"), 80)
    assert spent is not None
    child = replan(parent, 80, Changes.model_validate({"groups": [{"id": "g1", "epsilon": spent * (1 - 5e-7)}]}))
    g1 = child.group("g1")
    assert g1.status == "exhausted" and g1.epsilon is not None and g1.epsilon_spent is not None
    assert g1.epsilon_spent > g1.epsilon
    verify_executable(child)


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_a_discrete_block_stating_less_than_its_binding_groups_ledger_is_refused(accountant: str) -> None:
    """A pool's Skellam block states its epsilon (`gdpfed plan`'s secure-aggregation table);
    edited below its binding group's recomputed figure under the block's accountant it was
    verified. The plan checker refuses it naming the field; a run reports it."""
    document = _document(accountant=accountant)
    plan = load_plan(document)
    assert verify_executable(plan) == []  # as planned: the block states its binding group's figure
    block = document["pools"][0]["discrete"]
    assert block is not None and block["accountant"] == accountant
    stated = block["epsilon"]
    block["epsilon"] = stated * (1 - 1e-8)
    with pytest.raises(InvalidInputError) as refused:
        verify_executable(load_plan(document))
    assert refused.value.field == "pools.P1.discrete.epsilon" and "Skellam events spend" in refused.value.message
    found = verify_executable(load_plan(document), understated="report")
    assert [(item.field, item.executed) for item in found] == [("pools.P1.discrete.epsilon", pytest.approx(stated, rel=1e-12))]
    from planner.verify import understated_warning

    assert f"strict: pools.P1.discrete.epsilon states {stated * (1 - 1e-8):.10g}" in understated_warning(found)
