"""Where a re-plan starts and how many rounds it covers, one rule for every privacy unit
(``PlanDocument.remaining_rounds``, docs/planning.md §9)."""

from __future__ import annotations

from typing import Any

import pytest

from accounting.errors import InvalidInputError
from planner import Changes, make_plan, replan
from planner.schema import PlanDocument
from planner.units.metric_local import MetricScenario, plan_metric, replan_metric
from planner.units.silo_sample import SiloScenario
from planner.units.silo_sample import make_plan as make_silo_plan
from planner.units.silo_sample import replan as replan_silo
from tests.planner.conftest import worked_scenario


def document(rounds: int, start_round: int) -> PlanDocument:
    return PlanDocument(privacy_unit="client", method="m", rounds=rounds, start_round=start_round)


def test_the_child_starts_after_the_rounds_done_and_covers_the_rest() -> None:
    assert document(10, 0).remaining_rounds(0, 10) == (0, 10)
    assert document(10, 0).remaining_rounds(9, 10) == (9, 1)  # the last round still to run
    assert document(6, 4).remaining_rounds(2, 10) == (6, 4)  # a child plan counts its parents' rounds
    assert document(10, 0).remaining_rounds(10, 15) == (10, 5)  # a raised total continues a finished plan


@pytest.mark.parametrize("rounds_done", [-1, 11, True, False, 1.0, "1", None])
def test_rounds_done_is_an_integer_within_the_plans_rounds(rounds_done: Any) -> None:
    with pytest.raises(InvalidInputError) as refused:
        document(10, 0).remaining_rounds(rounds_done, 20)
    assert refused.value.field == "rounds_done"
    assert refused.value.reason == "must be an integer from 0 to the plan's 10 rounds"


def test_no_round_left_names_the_field_the_caller_can_change() -> None:
    with pytest.raises(InvalidInputError) as refused:
        document(6, 4).remaining_rounds(6, 10)
    assert (refused.value.field, refused.value.reason) == ("rounds_done", "no rounds remain: 10 of 10 have run")
    with pytest.raises(InvalidInputError) as refused:
        document(10, 0).remaining_rounds(10, 8, field="changes.rounds", advice=" (raise rounds to continue)")
    assert (refused.value.field, refused.value.reason) == (
        "changes.rounds", "no rounds remain: 10 of 8 have run (raise rounds to continue)")


def _silo() -> Any:
    return make_silo_plan(SiloScenario.model_validate({
        "silos": [{"id": "a", "num_samples": 400, "epsilon": 1.0}], "delta": 1e-5, "rounds": 4,
        "batch_size": 16, "clip_norm": 1.0,
    }), "mrmtl")


def _metric() -> Any:
    return plan_metric(MetricScenario.model_validate({
        "privacy_unit": "metric_local", "groups": [{"id": "all", "num_clients": 100, "noise_multiplier": 5.0}],
        "rounds": 4, "model_dim": 2, "clients_per_round": 7, "hypotheses": 2, "radius": 0.5,
    }))


@pytest.mark.parametrize(("build", "replan_unit", "changes", "field"), [
    (lambda: make_plan(worked_scenario(1)), replan, Changes(), "changes.rounds"),
    (_silo, replan_silo, {}, "rounds_done"),
    (_metric, replan_metric, {}, "rounds_done"),
])
def test_every_units_replan_applies_the_one_rule(build: Any, replan_unit: Any, changes: Any, field: str) -> None:
    plan = build()
    with pytest.raises(InvalidInputError) as refused:
        replan_unit(plan, plan.rounds + 1, changes)
    assert refused.value.field == "rounds_done"
    with pytest.raises(InvalidInputError) as refused:
        replan_unit(plan, plan.rounds, changes)
    assert refused.value.field == field and refused.value.reason.startswith(
        f"no rounds remain: {plan.rounds} of {plan.rounds} have run")
    child = replan_unit(plan, 1, changes, parent_plan_id="parent")
    assert (child.start_round, child.rounds) == (1, plan.rounds - 1)
