"""The service's ledger is the planner's ledger, for every method and per-group clip norms.

Issue 9 §1: the service once composed each group with its pool's ``noise_multiplier``
while the planner and the trainer used the group's effective one (``noise_std_P / C_g``);
with ``idp_scale`` on ``examples/scenario.json`` it reported 2.14 for every group where
the plan spends 1 / 2 / 4. The expected values here are computed independently of
``planner.ledger``: straight from the plan's pools and clip norms with
``accounting.epsilon_of_phases``.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest

from accounting.epsilon import epsilon_of_phases
from accounting.events import Phase
from planner.schema import PlanMethod
from tests.app.conftest import TestClient

SCENARIO = json.loads((Path(__file__).parents[2] / "examples" / "scenario.json").read_text())
METHODS = typing.get_args(PlanMethod)


def _scenario(method: str) -> dict:
    # the rounds below are reported without a mechanism, i.e. on the continuous Gaussian: a plan
    # of that mechanism states the figures its ledger counts (a skellam plan states its Skellam
    # events', docs/ledger.md §3, "What a plan states")
    scenario = {**json.loads(json.dumps(SCENARIO)), "secagg_mechanism": "gaussian_continuous"}
    if method not in ("idp_scale", "nonprivate"):
        # per-group clip norms: the effective multiplier differs from the pool's
        scenario["groups"][0]["clip_norm"] = 0.5
        scenario["groups"][2]["clip_norm"] = 2.0
    return scenario


def _expected(plan: dict, group: dict, rounds: int, accountant: str | None = None) -> float | None:
    if group["epsilon"] is None:
        return None
    pool = next(p for p in plan["pools"] if p["id"] == group["pool"])
    if group["sampling_rate"] == 0 or pool["noise_std"] == 0:
        return 0.0
    sigma = pool["noise_std"] / group["clip_norm"]
    phase = Phase(sampling_rate=group["sampling_rate"], noise_multiplier=sigma, steps=rounds)
    return float(epsilon_of_phases([phase], plan["scenario"]["delta"], accountant or plan["accountant"]).epsilon)


@pytest.mark.parametrize("method", METHODS)
def test_ledger_uses_each_groups_effective_multiplier(client: TestClient, method: str) -> None:
    created = client.post("/v1/plans", json={"scenario": _scenario(method), "method": method})
    assert created.status_code == 201, created.text
    plan = created.json()
    rounds = plan["rounds"]
    # the last round reported: every round before it counts too
    assert client.post(f"/v1/plans/{plan['id']}/rounds", json={"round_index": rounds - 1}).status_code == 201
    ledger = client.get(f"/v1/plans/{plan['id']}/ledger").json()
    assert ledger["rounds_counted"] == rounds
    by_id = {g["id"]: g for g in ledger["groups"]}
    for group in plan["groups"]:
        row = by_id[group["id"]]
        expected = _expected(plan, group, rounds)
        if method == "nonprivate":
            assert row["epsilon_spent"] is None or row["epsilon_spent"] == 0.0
            continue
        assert row["epsilon_spent"] == pytest.approx(expected, rel=1e-9), (method, group["id"])
        # the row's two figures (docs/ledger.md §3), the same composition under rdp and pld
        if expected:
            assert row["epsilon_rdp"] == pytest.approx(_expected(plan, group, rounds, "rdp"), rel=1e-9)
            assert row["epsilon_tight"] == pytest.approx(_expected(plan, group, rounds, "pld"), rel=1e-9)
        # and it is what the planner verified for the plan
        assert row["epsilon_spent"] == pytest.approx(group["epsilon_spent"], rel=1e-9)
        assert row["epsilon_spent"] <= group["epsilon"] * (1 + 2e-3)


def test_idp_scale_spends_each_budget_and_a_lower_budget_is_refused(client: TestClient) -> None:
    plan = client.post("/v1/plans", json={"scenario": SCENARIO, "method": "idp_scale"}).json()
    assert client.post(f"/v1/plans/{plan['id']}/rounds", json={"round_index": 99}).status_code == 201
    spent = {g["id"]: g["epsilon_spent"] for g in client.get(f"/v1/plans/{plan['id']}/ledger").json()["groups"]}
    assert spent["strict"] == pytest.approx(1.0, rel=2e-3)
    assert spent["medium"] == pytest.approx(2.0, rel=2e-3)
    assert spent["relaxed"] == pytest.approx(4.0, rel=2e-3)  # was 2.14 with the pool's multiplier

    # One rule for every budget change (docs/planning.md §9): below spent -> 409.
    plan_id = client.post("/v1/plans", json={"scenario": {**SCENARIO, "rounds": 200}, "method": "idp_scale"}).json()["id"]
    assert client.post(f"/v1/plans/{plan_id}/rounds", json={"round_index": 99}).status_code == 201
    relaxed_spent = {g["id"]: g["epsilon_spent"] for g in client.get(f"/v1/plans/{plan_id}/ledger").json()["groups"]}[
        "relaxed"]
    assert relaxed_spent > 2.2
    refused = client.post(f"/v1/plans/{plan_id}/replan",
                          json={"changes": {"groups": [{"id": "relaxed", "epsilon": 2.2}]}})
    assert refused.status_code == 409, refused.text
    assert refused.json()["code"] == "budget_conflict"
    assert refused.json()["field"] == "changes.groups.0.epsilon"
    assert client.get(f"/v1/plans/{plan_id}/ledger").json()["superseded_by"] is None  # nothing changed
    accepted = client.post(f"/v1/plans/{plan_id}/replan",
                           json={"changes": {"groups": [{"id": "relaxed", "epsilon": relaxed_spent}]}})
    assert accepted.status_code == 201, accepted.text
    relaxed = next(g for g in accepted.json()["groups"] if g["id"] == "relaxed")
    assert relaxed["status"] == "exhausted" and relaxed["sampling_rate"] == 0
