"""A switch that changes privacy or behaviour is a JSON boolean: ``"yes"``, ``1`` or
``"false"`` are refused with 422 naming the field, and nothing changes."""

from __future__ import annotations

import copy
from typing import Any

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
        body: dict[str, object] = {"scenario": {**copy.deepcopy(SMALL_SCENARIO), field: "yes"}}
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


# --- booleans are not numbers (accounting.validation.NumbersModel) ------------------------


@pytest.mark.parametrize("value", [True, False])
def test_a_boolean_is_not_a_number_in_a_scenario(client: TestClient, value: bool) -> None:
    for where, edit in [("scenario.groups.0.epsilon", lambda s: s["groups"][0].update(epsilon=value)),
                        ("scenario.groups.1.num_clients", lambda s: s["groups"][1].update(num_clients=value)),
                        ("scenario.rounds", lambda s: s.update(rounds=value)),
                        ("scenario.expected_clients", lambda s: s.update(expected_clients=value)),
                        ("scenario.clip_norm", lambda s: s.update(clip_norm=value))]:
        scenario = copy.deepcopy(SMALL_SCENARIO)
        edit(scenario)
        for url, body in (("/v1/plans", {"scenario": scenario}), ("/v1/populations", {"name": "p", "scenario": scenario})):
            response = client.post(url, json=body)
            assert response.status_code == 422, (url, where, response.text)
            assert response.json()["field"] == where, response.json()
            assert response.json()["message"] == f"{where}: must be a number, not a boolean", response.json()
    assert client.get("/v1/plans").json()["total"] == 0


def test_a_boolean_is_not_a_number_in_a_patch_a_replan_or_an_accounting_request(client: TestClient) -> None:
    population_id = _population(client)
    patched = client.patch(f"/v1/populations/{population_id}/groups/strict", json={"epsilon": True})
    assert (patched.status_code, patched.json()["field"]) == (422, "epsilon"), patched.text
    added = client.post(f"/v1/populations/{population_id}/groups", json={"id": "new", "epsilon": 2.0, "num_clients": True})
    assert (added.status_code, added.json()["field"]) == (422, "num_clients"), added.text
    groups = client.get(f"/v1/populations/{population_id}").json()["scenario"]["groups"]
    assert [(g["id"], g["epsilon"]) for g in groups] == [("strict", 1.0), ("medium", 2.0), ("loose", 4.0)]
    plan = client.post("/v1/plans", json={"scenario": copy.deepcopy(SMALL_SCENARIO)}).json()
    replan = client.post(f"/v1/plans/{plan['id']}/replan", json={"changes": {"groups": [{"id": "strict", "epsilon": True}]}})
    assert (replan.status_code, replan.json()["field"]) == (422, "changes.groups.0.epsilon"), replan.text
    rounds = client.post(f"/v1/plans/{plan['id']}/rounds", json={"round_index": True})
    assert (rounds.status_code, rounds.json()["field"]) == (422, "round_index"), rounds.text
    phase = {"sampling_rate": 0.1, "noise_multiplier": 1.0, "steps": 10}
    asks = [{"sampling_rate": True, "noise_multiplier": 1.0, "rounds": 10, "delta": 1e-5},
            {"sampling_rate": 0.1, "noise_multiplier": 1.0, "rounds": 10, "delta": 1e-5, "spent": [{**phase, "steps": True}]}]
    for body, where in zip(asks, ("sampling_rate", "steps"), strict=True):
        response = client.post("/v1/accounting/epsilon", json=body)
        assert response.status_code == 422 and response.json()["field"].endswith(where), response.text
        assert response.json()["message"].endswith(": must be a number, not a boolean"), response.text


def test_a_boolean_is_not_a_number_in_a_file_the_cli_reads(capsys, tmp_path) -> None:
    import json

    from app.cli import run
    from tests.app.test_cli_files import ROOT, one_line_error

    scenario = json.loads((ROOT / "examples" / "scenario.json").read_text())
    scenario["groups"][0]["epsilon"] = True
    bad = tmp_path / "true.json"
    bad.write_text(json.dumps(scenario))
    err = one_line_error(capsys, ["plan", str(bad)])
    assert err.endswith(f"{bad}: groups.0.epsilon: must be a number, not a boolean\n"), err
    plan = tmp_path / "plan.json"
    assert run(["plan", str(ROOT / "examples" / "scenario.json"), "--out", str(plan)]) == 0
    document = json.loads(plan.read_text())
    document["pools"][0]["noise_multiplier"] = True
    plan.write_text(json.dumps(document))
    err = one_line_error(capsys, ["plan", "replan", str(plan), "--changes", str(tmp_path / "none.json"), "--rounds-done", "1"])
    assert "pools.0.noise_multiplier: must be a number, not a boolean" in err, err
    config = tmp_path / "exp.yaml"
    config.write_text("name: t\nscenario:\n  groups: [{id: a, epsilon: 1.0, num_clients: 8}]\n  delta: 0.001\n"
                      "  rounds: 2\n  expected_clients: 4\n  min_clients_per_pool: 1\nmethods: [gdpfed_plus]\n"
                      "datasets: [{name: digits, spec: digits, model: mlp}]\nseeds: [true]\n")
    err = one_line_error(capsys, ["experiment", str(config)])
    assert "seeds.0: must be a number, not a boolean" in err, err


# --- a key no field takes names the field it was probably meant to be ---------------------


def test_a_typo_for_a_required_key_names_both_keys(client: TestClient) -> None:
    scenario: dict[str, Any] = copy.deepcopy(SMALL_SCENARIO)
    scenario["detla"] = scenario.pop("delta")
    response = client.post("/v1/plans", json={"scenario": scenario})
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "scenario.detla", response.json()
    # the typo's missing field is the suggestion, not a second error
    assert response.json()["message"] == "scenario.detla: unknown field 'detla'; did you mean 'delta'?", response.json()
    scenario["groups"][0]["num_client"] = scenario["groups"][0].pop("num_clients")
    scenario["delta"] = scenario.pop("detla")
    response = client.post("/v1/plans", json={"scenario": scenario})
    assert response.json()["message"] == ("scenario.groups.0.num_client: unknown field 'num_client'; "
                                          "did you mean 'num_clients'?"), response.json()
    population_id = _population(client)
    patched = client.patch(f"/v1/populations/{population_id}/groups/strict", json={"epsilom": 2.0})
    assert patched.json()["message"] == "epsilom: unknown field 'epsilom'; did you mean 'epsilon'?", patched.json()
    # nothing close: the key alone; the body's other errors are counted after it
    other = client.patch(f"/v1/populations/{population_id}/groups/strict", json={"zzz": 1, "epsilon": -1})
    assert other.json()["message"] == "zzz: unknown field 'zzz' (and 1 more)", other.json()
    asked = client.post("/v1/accounting/epsilon", json={"sampling_rate": 0.1, "noise_multipler": 1.0, "rounds": 5, "delta": 1e-5})
    assert asked.json()["message"] == ("noise_multipler: unknown field 'noise_multipler'; "
                                       "did you mean 'noise_multiplier'?"), asked.json()


def test_a_typo_in_a_file_names_both_keys(capsys, tmp_path) -> None:
    import json

    from tests.app.test_cli_files import ROOT, one_line_error

    scenario = json.loads((ROOT / "examples" / "scenario.json").read_text())
    scenario["detla"] = scenario.pop("delta")
    bad = tmp_path / "typo.yaml"
    import yaml

    bad.write_text(yaml.safe_dump(scenario))
    err = one_line_error(capsys, ["plan", str(bad)])
    assert err.endswith(f"{bad}: detla: unknown field 'detla'; did you mean 'delta'?\n"), err
