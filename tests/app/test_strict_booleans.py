"""A switch that changes privacy or behaviour is a JSON boolean: ``"yes"``, ``1`` or
``"false"`` are refused with 422 naming the field, and nothing changes."""

from __future__ import annotations

import copy

import pytest

from tests.app.conftest import SMALL_SCENARIO, TestClient

NOT_BOOLEANS = ["yes", "true", 1, 0, "false", "on"]


def _population(client: TestClient) -> str:
    response = client.post("/v1/populations", json={"name": "clinics", "scenario": copy.deepcopy(SMALL_SCENARIO)})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


@pytest.mark.parametrize("value", NOT_BOOLEANS)
def test_opt_out_must_be_a_json_boolean(client: TestClient, value: object) -> None:
    population_id = _population(client)
    plan = client.post(f"/v1/populations/{population_id}/plans").json()
    changes = client.get(f"/v1/populations/{population_id}/changes").json()["items"]
    response = client.patch(f"/v1/populations/{population_id}/groups/strict", json={"opt_out": value})
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "opt_out"
    # Nothing changed: the group keeps its budget and the plan stays active.
    population = client.get(f"/v1/populations/{population_id}").json()
    assert population["active_plan_id"] == plan["id"]
    assert {g["id"]: g["epsilon"] for g in population["scenario"]["groups"]}["strict"] == 1.0
    assert client.get(f"/v1/populations/{population_id}/changes").json()["items"] == changes


def test_privacy_switches_in_other_bodies_must_be_json_booleans(client: TestClient) -> None:
    for field in ("raw_closed_form", "report_prv"):
        body = {"scenario": {**copy.deepcopy(SMALL_SCENARIO), field: "yes"}}
        response = client.post("/v1/plans", json=body)
        assert response.status_code == 422, response.text
        assert response.json()["field"] == f"scenario.{field}"
    plan = client.post("/v1/plans", json={"scenario": copy.deepcopy(SMALL_SCENARIO)}).json()
    for change in ({"id": "strict", "opt_out": "yes"}, {"id": "strict", "remove": 1}):
        response = client.post(f"/v1/plans/{plan['id']}/replan", json={"changes": {"groups": [change]}})
        assert response.status_code == 422, response.text
        assert response.json()["field"].endswith(next(k for k in change if k != "id"))
    body = {"sampling_rate": 0.05, "rounds": 100, "epsilon": 2.0, "delta": 1e-5, "raw": "yes"}
    response = client.post("/v1/accounting/noise-multiplier", json=body)
    assert response.status_code == 422 and response.json()["field"] == "raw"
    # A JSON boolean is still accepted.
    assert client.post("/v1/accounting/noise-multiplier", json={**body, "raw": False}).status_code == 200


def test_a_body_that_is_not_json_names_the_body(client: TestClient) -> None:
    response = client.post("/v1/plans", content=b"{not json", headers={"Content-Type": "application/json"})
    assert response.status_code == 422 and response.json()["field"] == "body", response.text
    assert "not valid JSON" in response.json()["message"]
