"""The service's ledger shows each group's budget as the plan's scenario fixes it
(issue 25 §3; docs/ledger.md §5), even for a stored document whose group states another."""

from __future__ import annotations

from tests.app.conftest import TestClient, hand_made_plan, store_plan


def test_the_ledger_budget_is_the_scenarios(client: TestClient) -> None:
    plan = hand_made_plan({"a": 0.1}, {"a": 1.5}, rounds=10)
    assert plan.scenario.group("a").epsilon == 8.0
    # stored past every reader (the service stores only plans it made; this one is edited in memory)
    edited = plan.model_copy(update={"groups": [plan.groups[0].model_copy(update={"epsilon": 80.0})]})
    plan_id = store_plan(client, edited)
    # a round on it is refused, naming the field that lies (the plan is read, and checked, per
    # report since silo and metric plans are served: docs/ledger.md §5), never counted
    refused = client.post(f"/v1/plans/{plan_id}/rounds", json={"round_index": 0})
    assert refused.status_code == 422 and refused.json()["field"] == "groups.a.epsilon"
    ledger = client.get(f"/v1/plans/{plan_id}/ledger").json()
    assert ledger["rounds_counted"] == 0
    (group,) = ledger["groups"]
    assert group["epsilon"] == 8.0
    assert group["epsilon_remaining"] == 8.0 - group["epsilon_spent"]


def test_the_consoles_budget_series_is_the_scenarios() -> None:
    from app.services.console import spending

    plan = hand_made_plan({"a": 0.1}, {"a": 1.5}, rounds=10)
    edited = plan.model_copy(update={"groups": [plan.groups[0].model_copy(update={"epsilon": 80.0})]})
    rows, series = spending([(edited, 0, 4)])
    assert set(series.budget["a"]) == {8.0} and rows[0].epsilon == 8.0
