"""A request body that names a key twice is refused (422 naming the key's path), never resolved
to the last value: a duplicated ``epsilon`` would silently change a privacy budget
(docs/service.md §Errors)."""

from __future__ import annotations

import copy
import json

from tests.app.conftest import SMALL_SCENARIO, TestClient


def _post_raw(client: TestClient, method: str, url: str, text: str):
    return client.request(method, url, content=text.encode(), headers={"content-type": "application/json"})


def test_duplicate_key_in_a_patch_is_refused(client: TestClient) -> None:
    population = client.post("/v1/populations", json={"name": "p", "scenario": copy.deepcopy(SMALL_SCENARIO)})
    population_id = population.json()["id"]
    response = _post_raw(client, "PATCH", f"/v1/populations/{population_id}/groups/medium",
                         '{"epsilon": 0.7, "epsilon": 9}')
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["code"] == "invalid_input" and body["field"] == "epsilon", body
    assert body["message"].startswith("epsilon: duplicate key"), body
    # nothing changed
    groups = client.get(f"/v1/populations/{population_id}").json()["scenario"]["groups"]
    assert [g["epsilon"] for g in groups if g["id"] == "medium"] == [2.0]


def test_duplicate_key_deep_in_a_plan_request_names_its_path(client: TestClient) -> None:
    text = json.dumps({"scenario": copy.deepcopy(SMALL_SCENARIO)})
    text = text.replace('"id": "medium", "epsilon": 2.0', '"id": "medium", "epsilon": 0.5, "epsilon": 2.0')
    response = _post_raw(client, "POST", "/v1/plans", text)
    assert response.status_code == 422, response.text
    body = response.json()
    assert (body["code"], body["field"]) == ("invalid_input", "scenario.groups.1.epsilon"), body
    assert client.get("/v1/plans").json()["total"] == 0
    # the same body without the duplicate is planned
    assert _post_raw(client, "POST", "/v1/plans", json.dumps({"scenario": SMALL_SCENARIO})).status_code == 201

