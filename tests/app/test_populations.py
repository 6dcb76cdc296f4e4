"""Populations (the budget registry): changes, history, re-plans, conflicts, atomicity."""

from __future__ import annotations

import copy

import pytest

from tests.app.conftest import SMALL_SCENARIO, TestClient


@pytest.fixture
def db_url(backend_url: str) -> str:
    """Every test here runs on SQLite and on PostgreSQL."""
    return backend_url

def _population(client: TestClient, **scenario_overrides: object) -> str:
    scenario = {**copy.deepcopy(SMALL_SCENARIO), **scenario_overrides}
    response = client.post("/v1/populations", json={"name": "clinics", "scenario": scenario})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _state(client: TestClient, population_id: str) -> tuple[dict, dict, dict]:
    return (client.get(f"/v1/populations/{population_id}").json(),
            client.get(f"/v1/populations/{population_id}/changes").json(),
            client.get("/v1/plans").json())


def test_changes_without_active_plan_only_edit_the_registry(client: TestClient) -> None:
    population_id = _population(client)
    response = client.patch(f"/v1/populations/{population_id}/groups/medium", json={"epsilon": 3.0, "num_clients": 120})
    assert response.status_code == 200 and response.json()["plan"] is None
    groups = {g["id"]: g for g in response.json()["population"]["scenario"]["groups"]}
    assert (groups["medium"]["epsilon"], groups["medium"]["num_clients"]) == (3.0, 120)
    history = client.get(f"/v1/populations/{population_id}/changes").json()["items"]
    assert [(c["field"], c["old"], c["new"], c["actor"]) for c in history] == [
        ("epsilon", 2.0, 3.0, "initial-operator"), ("num_clients", 100, 120, "initial-operator")]
    assert client.patch(f"/v1/populations/{population_id}/groups/nope", json={"epsilon": 1}).status_code == 404
    assert client.patch(f"/v1/populations/{population_id}/groups/medium", json={}).json()["code"] == "invalid_input"


def test_active_plan_is_unique_and_changes_replan_it(client: TestClient) -> None:
    population_id = _population(client)
    plan = client.post(f"/v1/populations/{population_id}/plans").json()
    assert client.post(f"/v1/populations/{population_id}/plans").status_code == 409
    for index in range(4):
        client.post(f"/v1/plans/{plan['id']}/rounds", json={"round_index": index})
    # A population's plan is re-planned through the population, not directly.
    assert client.post(f"/v1/plans/{plan['id']}/replan", json={}).status_code == 409
    added = client.post(f"/v1/populations/{population_id}/groups",
                        json={"id": "newcomers", "epsilon": 3.0, "num_clients": 50})
    assert added.status_code == 201, added.text
    child = added.json()["plan"]
    assert child["parent_plan_id"] == plan["id"] and child["start_round"] == 4
    assert "newcomers" in {g["id"] for g in child["groups"]}
    assert added.json()["population"]["active_plan_id"] == child["id"]
    assert added.json()["changes"][0]["plan_id"] == child["id"]
    again = client.post(f"/v1/populations/{population_id}/groups", json={"id": "newcomers", "epsilon": 3.0,
                                                                          "num_clients": 5})
    assert again.status_code == 409
    refused = client.post(f"/v1/populations/{population_id}/groups",
                          json={"id": "late", "epsilon": 3.0, "num_clients": 5, "clip_norm": 2.0})
    assert refused.status_code == 422 and refused.json()["field"] == "clip_norm"


def test_refused_change_leaves_nothing_behind(client: TestClient) -> None:
    population_id = _population(client, expected_clients=250)
    plan = client.post(f"/v1/populations/{population_id}/plans").json()
    for index in range(10):
        client.post(f"/v1/plans/{plan['id']}/rounds", json={"round_index": index})
    before = _state(client, population_id)
    spent = {g["id"]: g for g in client.get(f"/v1/plans/{plan['id']}/ledger").json()["groups"]}["strict"]["epsilon_spent"]
    below = client.patch(f"/v1/populations/{population_id}/groups/strict", json={"epsilon": spent * 0.9})
    assert below.status_code == 409 and below.json()["field"] == "epsilon" and "spent" in below.json()["message"]
    # A re-plan the planner cannot honour (250 expected clients out of 201) is a conflict
    # too, with the planner's reason, and also changes nothing.
    impossible = client.patch(f"/v1/populations/{population_id}/groups/loose", json={"num_clients": 1})
    assert impossible.status_code == 409 and "expected_clients" in impossible.json()["message"]
    assert _state(client, population_id) == before


def test_a_patch_to_the_values_a_group_already_has_changes_nothing(client: TestClient) -> None:
    """docs/service.md §Populations: a PATCH that sets a group's budget (or size, or opt-out) to
    what it already is answers 200 with the population as it is: the same ``version`` and
    ``updated_at``, no change in the history, no re-plan. Before, it bumped the version and
    ``updated_at`` though nothing had changed."""
    population_id = _population(client)
    plan = client.post(f"/v1/populations/{population_id}/plans").json()
    for index in range(3):
        assert client.post(f"/v1/plans/{plan['id']}/rounds", json={"round_index": index}).status_code == 201
    before = _state(client, population_id)
    for body in ({"epsilon": 1.0}, {"epsilon": 1, "num_clients": 100}, {"num_clients": 100}):
        same = client.patch(f"/v1/populations/{population_id}/groups/strict", json=body)
        assert same.status_code == 200, same.text
        assert same.json() == {"population": before[0], "changes": [], "plan": None}, body
        assert _state(client, population_id) == before, body
    # an opted-out group opted out again: the same
    out = client.patch(f"/v1/populations/{population_id}/groups/loose", json={"opt_out": True})
    assert out.status_code == 200 and out.json()["plan"] is not None, out.text
    before = _state(client, population_id)
    again = client.patch(f"/v1/populations/{population_id}/groups/loose", json={"opt_out": True})
    assert again.status_code == 200 and again.json() == {"population": before[0], "changes": [], "plan": None}
    assert _state(client, population_id) == before
    # a real change still re-plans and bumps the version
    raised = client.patch(f"/v1/populations/{population_id}/groups/strict", json={"epsilon": 1.5})
    assert raised.status_code == 200 and raised.json()["plan"] is not None, raised.text
    assert raised.json()["population"]["version"] > before[0]["version"]


def test_opted_out_group_cannot_get_a_budget_back(client: TestClient) -> None:
    population_id = _population(client)
    plan = client.post(f"/v1/populations/{population_id}/plans").json()
    out = client.patch(f"/v1/populations/{population_id}/groups/loose", json={"opt_out": True})
    assert out.status_code == 200, out.text
    child = out.json()["plan"]
    client.post(f"/v1/plans/{child['id']}/rounds", json={"round_index": child["start_round"]})
    ledger = {g["id"]: g for g in client.get(f"/v1/plans/{child['id']}/ledger").json()["groups"]}
    assert ledger["loose"]["steps"] >= 1 and ledger["loose"]["epsilon"] is None
    assert ledger["loose"]["epsilon_spent"] is None and ledger["loose"]["opted_out"] is True
    back = client.patch(f"/v1/populations/{population_id}/groups/loose", json={"epsilon": 4.0})
    assert back.status_code == 409 and "without noise" in back.json()["message"]
    assert plan["id"] == child["parent_plan_id"]


def test_population_pages_and_validation(client: TestClient) -> None:
    ids = [_population(client) for _ in range(3)]
    page = client.get("/v1/populations?limit=2&offset=1").json()
    assert page["total"] == 3 and [p["id"] for p in page["items"]] == ids[::-1][1:3]
    bad = client.post("/v1/populations", json={"name": "x", "scenario": SMALL_SCENARIO, "method": "compare"})
    assert bad.status_code == 422 and bad.json()["field"] == "method"
    assert client.get("/v1/populations/nope").json()["code"] == "not_found"
