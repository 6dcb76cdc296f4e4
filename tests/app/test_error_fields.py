"""An error's ``field`` is the path the user can find: in the request body, else in the stored
plan's or population's document (``scenario.<field>``), the same on every endpoint
(docs/service.md §Errors); a silo plan's re-plan names its changes' fields below ``changes``."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from app.settings import Settings
from tests.app.conftest import OPERATOR_TOKEN, SMALL_SCENARIO, TestClient

ROOT = Path(__file__).resolve().parents[2]
# sigma_b = 0.9 exceeds z_eff / 2 of every pool (largest z_eff 1.71), not once the strict group asks for
# epsilon 0.1 (its z_eff ~1.97); rdp's multipliers (pld's, the default, are smaller: 1.52 there)
ADAPTIVE = {**copy.deepcopy(SMALL_SCENARIO), "adaptive_clip": {"count_noise_std": 0.9}, "accountant": "rdp"}
COUNT_NOISE = "scenario.adaptive_clip.count_noise_std"


@pytest.fixture
def settings(db_url: str) -> Settings:
    return Settings(database_url=db_url, initial_api_key=OPERATOR_TOKEN, compute_timeout_seconds=60, max_groups=3)


def error(response, status: int, code: str, field: str | None) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert (body["code"], body.get("field")) == (code, field), body
    if field is not None:
        assert body["message"].startswith(f"{field}: ") or f": {field}: " in body["message"], body
    return str(body["message"])


def test_replan_names_body_paths_and_the_plans_scenario(client: TestClient) -> None:
    plan = client.post("/v1/plans", json={"scenario": copy.deepcopy(SMALL_SCENARIO)}).json()
    replan = f"/v1/plans/{plan['id']}/replan"
    error(client.post(replan, json={"rounds_done": 50}), 422, "invalid_input", "changes.rounds")
    # a new total past the scenario's bound is the changes' field (it named scenario.rounds, which was 100)
    error(client.post(replan, json={"changes": {"rounds": 10**12}}), 422, "invalid_input", "changes.rounds")
    both = {"changes": {"groups": [{"id": "strict", "epsilon": 1, "opt_out": True}]}}
    error(client.post(replan, json=both), 422, "invalid_input", "changes.groups.0")
    twice = {"changes": {"groups": [{"id": "strict", "epsilon": 0.8}, {"id": "strict", "epsilon": 0.9}]}}
    error(client.post(replan, json=twice), 422, "invalid_input", "changes.groups")
    gone = {"changes": {"groups": [{"id": "nope", "remove": True}]}}
    error(client.post(replan, json=gone), 422, "invalid_input", "changes.groups.0.id")
    # pydantic's own check of the same body names the same path
    negative = {"changes": {"groups": [{"id": "strict", "epsilon": -1}]}}
    error(client.post(replan, json=negative), 422, "invalid_input", "changes.groups.0.epsilon")
    # a group changed twice is refused, not re-planned at its last entry (nothing is stored)
    twice = {"changes": {"groups": [{"id": "strict", "epsilon": 2}, {"id": "strict", "epsilon": 3}]}}
    assert "twice" in error(client.post(replan, json=twice), 422, "invalid_input", "changes.groups")
    for index in range(5):
        assert client.post(f"/v1/plans/{plan['id']}/rounds", json={"round_index": index}).status_code == 201
    lowered = {"changes": {"groups": [{"id": "strict", "epsilon": 0.01}]}}
    error(client.post(replan, json=lowered), 409, "budget_conflict", "changes.groups.0.epsilon")

    adaptive = client.post("/v1/plans", json={"scenario": ADAPTIVE})
    assert adaptive.status_code == 201, adaptive.text
    too_strict = {"changes": {"groups": [{"id": "strict", "epsilon": 0.1}]}}
    error(client.post(f"/v1/plans/{adaptive.json()['id']}/replan", json=too_strict), 422, "invalid_input", COUNT_NOISE)
    # the plan endpoint names the same setting the same way
    refused = {"scenario": {**ADAPTIVE, "groups": [{**ADAPTIVE["groups"][0], "epsilon": 0.1}, *ADAPTIVE["groups"][1:]]}}
    error(client.post("/v1/plans", json=refused), 422, "invalid_input", COUNT_NOISE)


def test_population_errors_name_the_populations_scenario(client: TestClient) -> None:
    strict = {**ADAPTIVE, "groups": [{**ADAPTIVE["groups"][0], "epsilon": 0.1}, *ADAPTIVE["groups"][1:]]}
    created = client.post("/v1/populations", json={"name": "too strict", "scenario": strict})
    assert created.status_code == 201, created.text
    error(client.post(f"/v1/populations/{created.json()['id']}/plans"), 422, "invalid_input", COUNT_NOISE)

    population = client.post("/v1/populations", json={"name": "clinics", "scenario": ADAPTIVE}).json()
    assert client.post(f"/v1/populations/{population['id']}/plans").status_code == 201
    patched = client.patch(f"/v1/populations/{population['id']}/groups/strict", json={"epsilon": 0.1})
    assert "cannot be honoured" in error(patched, 409, "conflict", COUNT_NOISE)
    added = client.post(f"/v1/populations/{population['id']}/groups", json={"id": "new", "epsilon": 2, "num_clients": 10})
    assert "at most 3 groups" in error(added, 422, "invalid_input", "scenario.groups")
    many = {**SMALL_SCENARIO, "groups": [*SMALL_SCENARIO["groups"], {"id": "x", "epsilon": 1, "num_clients": 5}]}
    error(client.post("/v1/populations", json={"name": "big", "scenario": many}), 422, "invalid_input", "scenario.groups")


def test_a_silo_plans_replan_names_the_changes_field(client: TestClient) -> None:
    """Silo plans are re-planned since issue 29 (they answered 409 no_service_ledger): a
    client-level change, a silo budget that is not a number or one that is not a silo are
    refused naming the field below ``changes``."""
    silo = client.post("/v1/plans", json={"scenario": json.loads((ROOT / "examples" / "silos.json").read_text())})
    assert silo.status_code == 201, silo.text
    replan = f"/v1/plans/{silo.json()['id']}/replan"
    error(client.post(replan, json={"changes": {"groups": [{"id": "x", "epsilon": 1.0}]}}), 422, "invalid_input",
          "changes.groups")
    error(client.post(replan, json={"changes": {"silos": [{"id": "x", "epsilon": "much"}]}}), 422, "invalid_input",
          "changes.silos.0.epsilon")
    error(client.post(replan, json={"changes": {"silos": [{"id": "nope", "epsilon": 1.0}]}}), 422, "invalid_input",
          "changes.silos.0.id")
    error(client.post(replan, json={"changes": []}), 422, "invalid_input", "changes")


@pytest.mark.parametrize("changes", [
    {"silos": [{"id": "a", "epsilon": "much"}]},
    {"silos": [{"id": "a", "epsilon": -1}, {"id": "b"}]},  # the first error, "(and 1 more)"
    {"silos": [{"id": "a", "epsilon": 1.0}], "rounds": 5},
    {"nothing": True},
])
def test_a_replans_changes_read_by_the_service_as_by_the_cli(client: TestClient, changes: dict[str, object]) -> None:
    """The service reads a re-plan's ``changes`` with ``gdpfed plan replan``'s reader
    (``planner.loading.load_changes``): the same field and the same message for the same
    document."""
    from accounting.errors import InvalidInputError
    from planner.loading import load_changes
    from planner.units import UNITS

    with pytest.raises(InvalidInputError) as cli:
        load_changes(changes, UNITS["silo_sample"].changes_model)
    silo = client.post("/v1/plans", json={"scenario": json.loads((ROOT / "examples" / "silos.json").read_text())})
    assert silo.status_code == 201, silo.text
    message = error(client.post(f"/v1/plans/{silo.json()['id']}/replan", json={"changes": changes}), 422,
                    "invalid_input", cli.value.field)
    assert message == cli.value.message
