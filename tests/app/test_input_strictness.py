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


KEEP_RATIO_MESSAGE = "must be a number in [1e-06, 1] or 'auto'"


def test_a_keep_ratio_error_names_the_body_field_and_the_allowed_values(client: TestClient) -> None:
    scenario = copy.deepcopy(SMALL_SCENARIO)
    scenario["groups"][0]["keep_ratio"] = 5
    for where, response in [
        ("scenario.groups.0.keep_ratio", client.post("/v1/plans", json={"scenario": scenario})),
        ("scenario.keep_ratio", client.post("/v1/plans", json={"scenario": {**SMALL_SCENARIO, "keep_ratio": "all"}})),
    ]:
        assert response.status_code == 422, response.text
        assert response.json()["field"] == where, response.json()
        assert response.json()["message"] == f"{where}: {KEEP_RATIO_MESSAGE}", response.json()
    plan_id = client.post("/v1/plans", json={"scenario": SMALL_SCENARIO}).json()["id"]
    replan = client.post(f"/v1/plans/{plan_id}/replan",
                         json={"rounds_done": 1, "changes": {"groups": [{"id": "strict", "keep_ratio": 5}]}})
    assert replan.json()["field"] == "changes.groups.0.keep_ratio", replan.json()
    assert replan.json()["message"].endswith(KEEP_RATIO_MESSAGE), replan.json()
    population_id = client.post("/v1/populations", json={"name": "p", "scenario": SMALL_SCENARIO}).json()["id"]
    added = client.post(f"/v1/populations/{population_id}/groups",
                        json={"id": "new", "epsilon": 3.0, "num_clients": 10, "keep_ratio": 5})
    assert (added.status_code, added.json()["field"]) == (422, "keep_ratio"), added.json()
    assert added.json()["message"] == f"keep_ratio: {KEEP_RATIO_MESSAGE}", added.json()


def test_messages_carry_no_pydantic_prefix_and_a_body_level_error_names_the_body(client: TestClient) -> None:
    population_id = client.post("/v1/populations", json={"name": "p", "scenario": SMALL_SCENARIO}).json()["id"]
    # {"opt_out": false} gives opt_out yet changes nothing: the message says which value changes something
    for body in ({}, {"epsilon": None}, {"opt_out": False}):
        response = client.patch(f"/v1/populations/{population_id}/groups/strict", json=body)
        assert (response.status_code, response.json()["field"]) == (422, "body"), response.json()
        assert response.json()["message"] == ("body: give at least one of epsilon, num_clients, opt_out: true "
                                              "(null, absent or opt_out: false: unchanged)"), response.json()
    silos = {"privacy_unit": "silo_sample", "delta": 1e-5, "rounds": 5, "batch_size": 8,
             "silos": [{"id": "a", "num_samples": 40, "epsilon": 1.0}, {"id": "a", "num_samples": 40, "epsilon": 2.0}]}
    twice = client.post("/v1/plans", json={"scenario": silos})
    assert twice.json()["message"] == "scenario.silos: silo id 'a' appears twice", twice.json()
    silos["silos"][1]["id"] = "b"
    population = client.post("/v1/populations", json={"name": "s", "scenario": silos})
    assert (population.status_code, population.json()["field"]) == (422, "scenario"), population.json()
    assert "populations hold client-level scenarios only" in population.json()["message"], population.json()
    assert "Value error" not in population.json()["message"]


def test_an_unknown_query_parameter_is_refused_naming_it(client: TestClient) -> None:
    created = client.post("/v1/plans", json={"scenario": copy.deepcopy(SMALL_SCENARIO)})
    assert created.status_code == 201, created.text
    # a typo of population_id must not silently list every plan
    response = client.get("/v1/plans", params={"populaton_id": "nope"})
    assert response.status_code == 422, response.text
    body = response.json()
    assert (body["code"], body["field"]) == ("invalid_input", "populaton_id"), body
    assert "population_id" in body["message"], body
    # a route that takes no query parameter says so
    response = client.get(f"/v1/plans/{created.json()['id']}", params={"verbose": "1"})
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "verbose"
    # the declared ones still work
    assert client.get("/v1/plans", params={"limit": 5, "population_id": "nope"}).json()["total"] == 0
    assert client.get(f"/v1/plans/{created.json()['id']}").status_code == 200
