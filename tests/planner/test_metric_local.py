"""The metric_local unit: plan, cap, ledger and verifier (docs/metric-privacy.md §4)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from pydantic import ValidationError

from accounting.errors import InvalidInputError
from planner.units.metric_local import (
    MetricPlan,
    MetricScenario,
    participation_cap,
    plan_metric,
    spent_metric,
    verify_metric,
)


def scenario(**changes: object) -> MetricScenario:
    data: dict[str, object] = {
        "privacy_unit": "metric_local",
        "groups": [{"id": "all", "num_clients": 100, "noise_multiplier": 5.0}],
        "rounds": 50,
        "model_dim": 2,
        "clients_per_round": 7,
        "hypotheses": 2,
        "radius": 0.5,
    }
    data.update(changes)
    return MetricScenario.model_validate(data)


def test_the_papers_synthetic_setting_leaks_0_4_per_participation() -> None:
    plan = plan_metric(scenario())
    group = plan.group("all")
    assert group.leakage_per_participation == pytest.approx(0.4)
    assert plan.sampling_rate == pytest.approx(0.07)
    assert group.expected_participations == pytest.approx(3.5)
    assert group.max_participations is None and group.leakage_bound == pytest.approx(50 * 0.4)
    # public radius 0.5: E||rho|| = nu r, per coordinate sqrt(n + 1) nu r / n
    assert group.expected_noise_norm == pytest.approx(2.5)
    assert group.noise_std_per_coordinate == pytest.approx(math.sqrt(3) * 2.5 / 2)
    # the ledger sums n / nu per participation: every round may have sampled the client
    assert spent_metric(plan, 0) == {"all": 0.0}
    assert spent_metric(plan, 3) == {"all": pytest.approx(1.2)}
    assert plan.warnings == []


@pytest.mark.parametrize(("model_dim", "nu", "budget", "cap"), [(2, 5.0, 2.0, 5), (2, 5.0, 1.99, 4), (11, 1.0, 36.3, 3), (10, 3.0, 10.0, 3)])
def test_the_cap_is_floor_of_budget_times_nu_over_n(model_dim: int, nu: float, budget: float, cap: int) -> None:
    assert participation_cap(model_dim, nu, budget) == cap
    plan = plan_metric(scenario(model_dim=model_dim, groups=[
        {"id": "g", "num_clients": 100, "noise_multiplier": nu, "leakage_budget": budget}
    ]))
    group = plan.group("g")
    assert group.max_participations == cap
    per = model_dim / nu
    for rounds_run in (0, 1, cap, cap + 1, 50):
        # independent arithmetic: participations never exceed the cap
        assert spent_metric(plan, rounds_run)["g"] == pytest.approx(min(rounds_run, cap) * per)
    assert group.leakage_bound is not None and group.leakage_bound <= budget
    assert group.leakage_bound + per > budget  # one more release would pass it


def test_nu_from_a_budget_is_n_q_t_over_l() -> None:
    plan = plan_metric(scenario(groups=[{"id": "g", "num_clients": 100, "leakage_budget": 1.4}]))
    group = plan.group("g")
    assert group.noise_multiplier == pytest.approx(2 * 0.07 * 50 / 1.4)
    # its expected participations q T then leak exactly L; the cap is floor(q T)
    assert group.leakage_per_participation is not None
    assert group.expected_participations * group.leakage_per_participation == pytest.approx(1.4)
    assert group.max_participations == math.floor(0.07 * 50)


def test_groups_choose_their_own_noise_and_opting_out_has_no_guarantee() -> None:
    plan = plan_metric(scenario(groups=[
        {"id": "careful", "num_clients": 30, "noise_multiplier": 10.0},
        {"id": "open", "num_clients": 70, "noise_multiplier": 0.0},
    ]))
    assert plan.group("careful").leakage_per_participation == pytest.approx(0.2)
    assert plan.group("open").leakage_per_participation is None
    assert spent_metric(plan, 4) == {"careful": pytest.approx(0.8), "open": None}
    assert any("no privacy guarantee" in w for w in plan.warnings)


def test_warnings_large_models_and_own_update_radius() -> None:
    plan = plan_metric(scenario(model_dim=206_590, radius_rule="own_update", radius=None))
    text = " ".join(plan.warnings)
    assert "means nothing" in text and "own_update" in text and "private data" in text
    assert plan.group("all").expected_noise_norm is None


@pytest.mark.parametrize(
    ("changes", "words", "field"),
    [
        ({"radius": None}, "needs a radius", "radius"),
        ({"clients_per_round": 101}, "exceeds", "clients_per_round"),
        ({"groups": [{"id": "g", "num_clients": 5}]}, "noise_multiplier, leakage_budget or both", "groups.0"),
        ({"groups": [{"id": "g", "num_clients": 5, "noise_multiplier": 0, "leakage_budget": 1}], "clients_per_round": 1},
         "cannot meet", "groups.0"),
        ({"groups": [{"id": "g", "num_clients": 5, "noise_multiplier": 1}, {"id": "g", "num_clients": 5, "noise_multiplier": 1}],
          "clients_per_round": 1}, "unique", "groups"),
        ({"epsilon": 1.0}, "unknown field .epsilon.", "epsilon"),
        ({"radius_rule": "previous_round"}, "needs a min_radius", "min_radius"),
        ({"radius_rule": "previous_round", "radius": None, "min_radius": 0.1}, "needs a radius", "radius"),
        ({"radius_rule": "previous_round", "min_radius": 0.6}, "exceeds the radius", "min_radius"),
        ({"min_radius": 0.1}, "previous_round only", "min_radius"),
    ],
)
def test_bad_scenarios_are_refused(changes: dict[str, object], words: str, field: str) -> None:
    """Each refusal names the field to fix (the CLI's and the service's one line print it:
    ``clients_per_round: ...``, not ``input: ...`` or ``scenario: ...``)."""
    from accounting.errors import validation_error_line

    with pytest.raises(ValidationError, match=words) as refused:
        scenario(**changes)
    assert validation_error_line(refused.value.errors())[0] == field


def test_the_verifier_refuses_a_changed_document() -> None:
    plan = plan_metric(scenario(groups=[{"id": "g", "num_clients": 100, "noise_multiplier": 5.0, "leakage_budget": 2.0}]))
    verify_metric(MetricPlan.model_validate(plan.model_dump(mode="json")))
    for field, value in (("leakage_per_participation", 0.1), ("max_participations", 50), ("noise_multiplier", 50.0)):
        document = plan.model_dump(mode="json")
        document["groups"][0][field] = value
        with pytest.raises(InvalidInputError) as exc:
            verify_metric(MetricPlan.model_validate(document))
        assert exc.value.field == f"groups.g.{field}" and "states" in str(exc.value)
    document = plan.model_dump(mode="json")
    document["sampling_rate"] = 0.01
    with pytest.raises(InvalidInputError, match="sampling_rate"):
        verify_metric(MetricPlan.model_validate(document))


def test_the_previous_round_rule_bounds_the_leakage_at_the_reference_radius() -> None:
    """Each release leaks n / nu within its round's radius r_t >= min_radius, hence at most
    n r / (nu min_radius) within the reference radius r: the plan states that bound."""
    plan = plan_metric(scenario(radius_rule="previous_round", min_radius=0.1))
    group = plan.groups[0]
    assert group.leakage_bound == pytest.approx(50 * 2 / 5)
    assert group.leakage_bound_at_radius == pytest.approx(50 * 2 / 5 * 0.5 / 0.1)
    assert group.expected_noise_norm is None  # data-dependent radius after round 0
    assert any("previous_round" in w for w in plan.warnings)
    verify_metric(plan)
    assert plan_metric(scenario()).groups[0].leakage_bound_at_radius is None


def test_a_leakage_budget_change_moves_the_cap_and_keeps_nu() -> None:
    """A metric re-plan (docs/metric-privacy.md §4): the group's nu is kept (released leakage
    cannot change), the cap becomes floor(L nu / n) over the whole run, the child is read
    back and verified, and a budget below the worst client's leakage so far is refused."""
    from accounting.errors import BudgetConflictError
    from planner.units import load_plan_document
    from planner.units.base import Participations
    from planner.units.metric_local import replan_metric

    data = scenario(groups=[{"id": "all", "num_clients": 100, "leakage_budget": 4.0}], model_dim=10)
    parent = plan_metric(data)
    nu = parent.groups[0].noise_multiplier
    assert parent.groups[0].max_participations == participation_cap(10, nu, 4.0)
    seen = Participations(counts={"all": {0: 2, 1: 1}}, unknown_rounds=1)  # client 0: 3 releases counted
    with pytest.raises(BudgetConflictError) as refused:
        replan_metric(parent, 5, {"groups": [{"id": "all", "leakage_budget": 2.9 * 10 / nu}]}, seen)
    assert refused.value.field == "changes.groups.0.leakage_budget"
    child = replan_metric(parent, 5, {"groups": [{"id": "all", "leakage_budget": 8.0}]}, seen, "parent-id")
    assert (child.start_round, child.rounds, child.parent_plan_id) == (5, 45, "parent-id")
    assert child.groups[0].noise_multiplier == nu and child.groups[0].max_participations == participation_cap(10, nu, 8.0)
    verify_metric(load_plan_document(child.model_dump(mode="json")))  # type: ignore[arg-type]
    # the planner's own bound counts the parent's rounds: min(5 + 0, cap) releases after 0 rounds of the child
    assert spent_metric(child, 0)["all"] == pytest.approx(min(5, child.groups[0].max_participations or 0) * 10 / nu)


def test_cli_accountant_option_on_a_metric_scenario_names_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    """``gdpfed plan examples/metric.json --accountant rdp``: one line naming ``--accountant``
    (a metric plan has none), exit 2, not ``accountant: unknown field`` of a file that has none."""
    from pathlib import Path

    from app.cli import run

    example = Path(__file__).resolve().parents[2] / "examples" / "metric.json"
    assert run(["plan", str(example), "--accountant", "rdp"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--accountant: metric_local plans have no accountant" in err[0], err


def test_cli_replan_of_a_metric_plan_prints_the_rounds_the_child_covers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """``gdpfed plan replan`` on a metric plan after 10 of 100 rounds: the description's
    rounds are the child's 90 (its ``rounds``), with where they sit in the run, not the
    run's total 100; a plan from round 0 still reads ``100 rounds``."""
    from app.cli import run

    example = Path(__file__).resolve().parents[2] / "examples" / "metric.json"
    parent, changes = tmp_path / "plan.json", tmp_path / "changes.json"
    changes.write_text("{}", encoding="utf-8")
    assert run(["plan", str(example), "--out", str(parent)]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("  100 rounds, 7 of 100 clients a round")
    assert run(["plan", "replan", str(parent), "--rounds-done", "10", "--changes", str(changes)]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert line.startswith("  90 rounds (rounds 10 .. 99 of the run's 100; the group figures count all 100), "
                           "7 of 100 clients a round"), line
