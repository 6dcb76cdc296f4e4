"""Silo and metric plans in the service (issue 29): plan, report rounds, change budgets
mid-run, refused reports, and the service's ledger equal to what the reports imply.

Every round is posted the way the trainer's reporting client posts it (``trainer.run.
reporting.ServiceLink`` sending ``planner.service_api.RoundReport`` bodies, docs/service.md
§Clients), on SQLite and PostgreSQL. The expected figures are computed here independently
of the service and of ``planner.ledger``: straight from ``accounting`` (``epsilon_of_events``
for a silo's DP-SGD steps, ``metric_leakage`` for a client's releases), from the events the
reports imply (docs/ledger.md §7-§8).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from accounting import epsilon_of_events, metric_leakage
from accounting.events import MetricLeakage, PoissonSampledGaussian
from planner.service_api import RoundReport
from planner.units import UNITS, parse_ledger
from tests.app.conftest import OPERATOR_TOKEN, TestClient

SILO = UNITS["silo_sample"]
METRIC = UNITS["metric_local"]

SILO_SCENARIO = {
    "privacy_unit": "silo_sample", "accountant": "rdp",
    "silos": [{"id": "a", "num_samples": 400, "epsilon": 1.0}, {"id": "b", "num_samples": 100, "epsilon": 4.0}],
    "delta": 1e-5, "rounds": 10, "batch_size": 16, "clip_norm": 1.0,
}
# g: n / nu = 10 / 20 = 0.5 a release, cap floor(1.0 * 20 / 10) = 2; h: 1.0 a release, no cap
METRIC_SCENARIO = {
    "privacy_unit": "metric_local",
    "groups": [{"id": "g", "num_clients": 5, "noise_multiplier": 20.0, "leakage_budget": 1.0},
               {"id": "h", "num_clients": 4, "noise_multiplier": 10.0}],
    "rounds": 8, "model_dim": 10, "clients_per_round": 3, "radius": 1.0,
}


@pytest.fixture
def db_url(backend_url: str) -> str:
    return backend_url


class TrainerLink:
    """Posts rounds as the trainer's reporting client does (its ``ServiceLink``, its bodies)."""

    def __init__(self, client: httpx.Client) -> None:
        from trainer.run.reporting import ServiceLink

        self.link = ServiceLink("http://testserver", OPERATOR_TOKEN, client=client, attempts=1)

    def report(self, plan_id: str, round_index: int, status: str = "completed",
               participants: dict[str, list[int]] | None = None, **extra: Any) -> httpx.Response:
        body = RoundReport(round_index=round_index, status=status,
                           participants=participants, **extra).model_dump(mode="json")
        response = self.link.request("POST", f"/v1/plans/{plan_id}/rounds", body)
        assert not isinstance(response, str), response
        return response


@pytest.fixture
def trainer(client: TestClient) -> Iterator[TrainerLink]:
    yield TrainerLink(client)


def error(response: httpx.Response, status: int, code: str, field: str | None) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert (body["code"], body.get("field")) == (code, field), body
    return str(body["message"])


def silo_epsilons(phases: list[tuple[float, float, int]], delta: float) -> float:
    """A silo's epsilon from its DP-SGD phases (q, sigma, steps), by accounting's RDP accountant."""
    events = [PoissonSampledGaussian(sampling_rate=q, noise_multiplier=s, steps=t) for q, s, t in phases if t]
    return float(epsilon_of_events(events, delta, "rdp").epsilon) if events else 0.0


def test_silo_plan_rounds_budget_change_and_ledger(client: TestClient, trainer: TrainerLink) -> None:
    created = client.post("/v1/plans", json={"scenario": SILO_SCENARIO})
    assert created.status_code == 201, created.text
    parent = created.json()
    pid = parent["id"]
    for r in range(4):
        assert trainer.report(pid, r, "started").status_code == 201
        assert trainer.report(pid, r, metrics={"loss": 1.0 / (r + 1)}).status_code == 201
    again = trainer.report(pid, 2)
    assert again.status_code == 200 and again.json()["duplicate"] is True
    # refused reports name their field and change nothing
    error(trainer.report(pid, 10), 422, "invalid_input", "round_index")
    error(trainer.report(pid, 4, participants={"a": [1]}), 422, "invalid_input", "participants")
    error(trainer.report(pid, 4, aborted_pools=["P0"]), 422, "invalid_input", "aborted_pools")

    ledger = client.get(f"/v1/plans/{pid}/ledger").json()
    assert (ledger["privacy_unit"], ledger["label"], ledger["accountant"]) == ("silo_sample", "silo sample-level", "rdp")
    assert ledger["rounds_counted"] == 4 and ledger["rounds_reported"] == 4
    assert "groups" not in ledger  # never a client-level figure beside the silos'
    expected = {s["id"]: silo_epsilons([(s["sampling_rate"], s["noise_multiplier"], 4 * s["steps_per_round"])], 1e-5)
                for s in parent["silos"]}
    assert {s["id"]: s["epsilon_spent"] for s in ledger["silos"]} == pytest.approx(expected, rel=1e-9)
    assert type(parse_ledger(ledger)).__name__ == "SiloLedgerOut"

    # budget changes: below what a silo spent, unknown silos, bad values are refused by field
    replan = f"/v1/plans/{pid}/replan"
    message = error(client.post(replan, json={"changes": {"silos": [{"id": "a", "epsilon": expected["a"] / 2}]}}),
                    409, "budget_conflict", "changes.silos.0.epsilon")
    assert "silo a has already spent" in message
    error(client.post(replan, json={"changes": {"silos": [{"id": "z", "epsilon": 2.0}]}}), 422, "invalid_input",
          "changes.silos.0.id")
    error(client.post(replan, json={"changes": {"silos": [{"id": "a", "epsilon": -1}]}}), 422, "invalid_input",
          "changes.silos.0.epsilon")
    error(client.post(replan, json={"changes": {"groups": []}}), 422, "invalid_input", "changes.groups")
    # a raised and a lowered budget: every silo re-calibrated for the 6 remaining rounds
    child = client.post(replan, json={"changes": {"silos": [{"id": "a", "epsilon": 2.0}, {"id": "b", "epsilon": 3.0}]}})
    assert child.status_code == 201, child.text
    kid = child.json()
    assert (kid["start_round"], kid["rounds"], kid["parent_plan_id"]) == (4, 6, pid)
    assert [s["epsilon"] for s in kid["silos"]] == [2.0, 3.0]
    assert client.get(f"/v1/plans/{pid}").json()["superseded_by"] == kid["id"]
    # the parent's later rounds belong to the re-plan
    refused = trainer.report(pid, 4, "started")
    assert error(refused, 409, "superseded", "round_index") and refused.json()["superseded_by"] == kid["id"]
    for r in range(4, 10):
        assert trainer.report(kid["id"], r, "started").status_code == 201
        assert trainer.report(kid["id"], r).status_code == 201

    final = client.get(f"/v1/plans/{kid['id']}/ledger").json()
    assert final["rounds_counted"] == 6 and final["label"] == "silo sample-level"
    for silo, before, after in zip(final["silos"], parent["silos"], kid["silos"]):
        independent = silo_epsilons([
            (before["sampling_rate"], before["noise_multiplier"], 4 * before["steps_per_round"]),
            (after["sampling_rate"], after["noise_multiplier"], 6 * after["steps_per_round"]),
        ], 1e-5)
        assert silo["epsilon_spent"] == pytest.approx(independent, rel=1e-9)
        assert silo["epsilon_spent"] <= silo["epsilon"] * (1 + 1e-9)
    listed = client.get("/v1/plans").json()["items"]
    assert [(p["id"], p["parent_plan_id"]) for p in listed[:2]] == [(kid["id"], pid), (pid, None)]


def metric_expected(counts: dict[str, dict[int, int]], unknown: int) -> dict[str, tuple[float, float]]:
    """(worst-case, median) leakage per group from per-client releases, by ``accounting``:
    every client's releases (reported, plus one per round without participants, within the
    cap), each ``MetricLeakage.laplace(n, nu, 1)``; clients never reported count 0 + unknown."""
    plan = {"g": (20.0, 5, 2), "h": (10.0, 4, None)}
    result = {}
    for group, (nu, clients, cap) in plan.items():
        releases = [counts.get(group, {}).get(c, 0) for c in sorted(counts.get(group, {}))]
        releases += [0] * (clients - len(releases))
        releases = [r + unknown if cap is None else min(r + unknown, cap) for r in releases]
        leak = [metric_leakage([MetricLeakage.laplace(10, nu, r)]) if r else 0.0 for r in releases]
        result[group] = (max(leak), statistics.median(leak))
    return result


def check_metric_ledger(ledger: dict[str, Any], counts: dict[str, dict[int, int]], unknown: int) -> None:
    assert ledger["label"] == "leakage (metric d-privacy)" and "epsilon" not in str(sorted(ledger))
    assert ledger["rounds_without_participants"] == unknown
    expected = metric_expected(counts, unknown)
    got = {g["id"]: (g["leakage_spent"], g["leakage_median"]) for g in ledger["groups"]}
    assert got == {k: pytest.approx(v, rel=1e-12) for k, v in expected.items()}


def test_metric_plan_participations_budget_change_and_ledger(client: TestClient, trainer: TrainerLink) -> None:
    created = client.post("/v1/plans", json={"scenario": METRIC_SCENARIO})
    assert created.status_code == 201, created.text
    pid = created.json()["id"]
    counts: dict[str, dict[int, int]] = {}

    def released(participants: dict[str, list[int]]) -> None:
        for group, clients in participants.items():
            for c in clients:
                counts.setdefault(group, {})[c] = counts.setdefault(group, {}).get(c, 0) + 1

    # round 0: participants with the claim; the completion may leave them out
    r0 = {"g": [0, 1], "h": [5]}
    assert trainer.report(pid, 0, "started", participants=r0).status_code == 201
    assert trainer.report(pid, 0).status_code == 201
    released(r0)
    # round 1: participants with the completion
    r1 = {"g": [0], "h": [5, 6]}
    assert trainer.report(pid, 1, "started").status_code == 201
    check_metric_ledger(client.get(f"/v1/plans/{pid}/ledger").json(), counts, 1)  # claimed: one more release each
    assert trainer.report(pid, 1, participants=r1).status_code == 201
    released(r1)
    check_metric_ledger(client.get(f"/v1/plans/{pid}/ledger").json(), counts, 0)

    # refused: client 0 of g is at its cap of 2; unknown group; a client twice or in two
    # groups; more distinct clients than the group has; changed participants of a claim
    message = error(trainer.report(pid, 2, participants={"g": [0]}), 409, "budget_conflict", "participants.g")
    assert "cap of 2" in message
    error(trainer.report(pid, 2, participants={"x": [1]}), 422, "invalid_input", "participants.x")
    error(trainer.report(pid, 2, participants={"g": [3, 3]}), 422, "invalid_input", "participants.g")
    error(trainer.report(pid, 2, participants={"g": [2], "h": [2]}), 422, "invalid_input", "participants.h")
    error(trainer.report(pid, 2, participants={"g": [2, 3, 4, 8]}), 422, "invalid_input", "participants.g")
    # the run's ids are 0..8, its 9 clients dealt into g and h (nothing else can have released)
    message = error(trainer.report(pid, 2, participants={"h": [9]}), 422, "invalid_input", "participants.h")
    assert "not one of the run's 9 clients (ids 0 to 8)" in message
    assert trainer.report(pid, 2, "started", participants={"g": [2]}).status_code == 201
    error(trainer.report(pid, 2, participants={"g": [3]}), 409, "conflict", "participants")
    assert trainer.report(pid, 2, participants={"g": [2]}).status_code == 201
    released({"g": [2]})
    # round 3 is never reported; round 4 is: round 3 counts as one release of every client
    r4 = {"g": [3], "h": [7]}
    assert trainer.report(pid, 4, participants=r4).status_code == 201
    released(r4)
    check_metric_ledger(client.get(f"/v1/plans/{pid}/ledger").json(), counts, 1)
    # client 1 of g reaches its cap: accepted on its reported releases (1 + 1 = 2), though the
    # ledger already counts the unknown round 3 as its second release (min(2 + 1, 2) = 2)
    assert trainer.report(pid, 5, participants={"g": [1]}).status_code == 201
    released({"g": [1]})
    check_metric_ledger(client.get(f"/v1/plans/{pid}/ledger").json(), counts, 1)
    error(trainer.report(pid, 6, participants={"g": [1]}), 409, "budget_conflict", "participants.g")

    # leakage-budget changes move the cap; below the worst client's leakage is refused
    replan = f"/v1/plans/{pid}/replan"
    error(client.post(replan, json={"changes": {"groups": [{"id": "g", "leakage_budget": 0.5}]}}),
          409, "budget_conflict", "changes.groups.0.leakage_budget")
    error(client.post(replan, json={"changes": {"groups": [{"id": "g", "epsilon": 2.0}]}}),
          422, "invalid_input", "changes.groups.0.epsilon")
    child = client.post(replan, json={"changes": {"groups": [{"id": "g", "leakage_budget": 2.0}]}})
    assert child.status_code == 201, child.text
    kid = child.json()
    assert (kid["start_round"], kid["rounds"], kid["groups"][0]["max_participations"]) == (6, 2, 4)
    assert kid["groups"][0]["noise_multiplier"] == 20.0  # nu kept: released leakage cannot change
    # the new cap counts the run's releases, the parent's included
    r6 = {"g": [0, 1], "h": [5]}
    assert trainer.report(kid["id"], 6, participants=r6).status_code == 201
    released(r6)
    ledger = client.get(f"/v1/plans/{kid['id']}/ledger").json()
    assert [g["max_participations"] for g in ledger["groups"]] == [4, None]

    def capped4(c: dict[str, dict[int, int]], unknown: int) -> dict[str, tuple[float, float]]:
        g = [min(c["g"].get(k, 0) + unknown, 4) for k in range(5)]  # clients 0-4 of g, cap 4 now
        h = [c["h"].get(k, 0) + unknown for k in (5, 6, 7)] + [unknown]
        leak_g = [metric_leakage([MetricLeakage.laplace(10, 20.0, r)]) if r else 0.0 for r in g]
        leak_h = [metric_leakage([MetricLeakage.laplace(10, 10.0, r)]) if r else 0.0 for r in h]
        return {"g": (max(leak_g), statistics.median(leak_g)), "h": (max(leak_h), statistics.median(leak_h))}

    got = {g["id"]: (g["leakage_spent"], g["leakage_median"]) for g in ledger["groups"]}
    assert got == {k: pytest.approx(v, rel=1e-12) for k, v in capped4(counts, 1).items()}
    assert ledger["rounds_without_participants"] == 1
    assert type(parse_ledger(ledger)).__name__ == "MetricLedgerOut"


def test_real_server_kill_and_restart_loses_no_acknowledged_round(backend_url: str) -> None:
    """A real ``gdpfed serve`` on each backend: a silo and a metric run report rounds the
    trainer's way, a budget change of each lands mid-run, refused reports change nothing,
    the server is killed (SIGKILL) and started again on the same database, the runs finish,
    and every acknowledged round is in the ledgers, which equal the independent figures."""
    from tests.app.test_e2e import serve
    from trainer.run.reporting import ServiceLink

    token = "gdpfed_unit-ledgers-real-server-key-0123456789"
    acknowledged: set[tuple[str, int]] = set()
    counts: dict[str, dict[int, int]] = {}

    def post(link: ServiceLink, plan_id: str, round_index: int, status: str = "completed",
             participants: dict[str, list[int]] | None = None) -> httpx.Response:
        body = RoundReport(round_index=round_index, status=status, participants=participants)
        response = link.request("POST", f"/v1/plans/{plan_id}/rounds", body.model_dump(mode="json"))
        assert not isinstance(response, str), response
        if response.status_code in (200, 201):
            acknowledged.add((plan_id, round_index))
        return response

    with serve(backend_url, initial_api_key=token) as server:
        link = ServiceLink(server.base_url, token, attempts=1)
        api = httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        silo = api.post("/v1/plans", json={"scenario": SILO_SCENARIO}).json()
        metric = api.post("/v1/plans", json={"scenario": METRIC_SCENARIO}).json()
        for r in range(3):
            assert post(link, silo["id"], r, "started").status_code == 201
            assert post(link, silo["id"], r).status_code == 201
        for r, who in enumerate(({"g": [0], "h": [5]}, {"g": [1], "h": [5]})):
            assert post(link, metric["id"], r, "started", who).status_code == 201
            for group, clients in who.items():
                for c in clients:
                    counts.setdefault(group, {})[c] = counts.setdefault(group, {}).get(c, 0) + 1
        assert post(link, metric["id"], 2, participants={"x": [0]}).status_code == 422
        silo_child = api.post(f"/v1/plans/{silo['id']}/replan",
                              json={"changes": {"silos": [{"id": "a", "epsilon": 1.5}]}}).json()
        metric_child = api.post(f"/v1/plans/{metric['id']}/replan",
                                json={"changes": {"groups": [{"id": "g", "leakage_budget": 1.5}]}}).json()
        assert (silo_child["start_round"], metric_child["start_round"]) == (3, 2)
        assert post(link, silo["id"], 3, "started").status_code == 409  # superseded
        assert post(link, silo_child["id"], 3, "started").status_code == 201  # claimed, never completed
        server.process.kill()  # no shutdown: only what was committed survives
        server.process.wait()
        link.close()
        api.close()

    with serve(backend_url) as server:
        link = ServiceLink(server.base_url, token, attempts=1)
        api = httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        for plan_id in {p for p, _ in acknowledged}:
            ledger = api.get(f"/v1/plans/{plan_id}/ledger").json()
            rows = {r for p, r in acknowledged if p == plan_id}
            assert ledger["rounds_reported"] == len(rows) and ledger["last_round_index"] == max(rows), ledger
        for r in range(3, 10):
            assert post(link, silo_child["id"], r).status_code == 201
        for r in range(2, 8):
            who = {"h": [6 + r % 2]}
            assert post(link, metric_child["id"], r, participants=who).status_code == 201
            counts["h"][6 + r % 2] = counts["h"].get(6 + r % 2, 0) + 1
        final_silo = api.get(f"/v1/plans/{silo_child['id']}/ledger").json()
        final_metric = api.get(f"/v1/plans/{metric_child['id']}/ledger").json()
        link.close()
        api.close()

    assert final_silo["rounds_counted"] == 7 and final_silo["label"] == "silo sample-level"
    for row, before, after in zip(final_silo["silos"], silo["silos"], silo_child["silos"]):
        independent = silo_epsilons([
            (before["sampling_rate"], before["noise_multiplier"], 3 * before["steps_per_round"]),
            (after["sampling_rate"], after["noise_multiplier"], 7 * after["steps_per_round"]),
        ], 1e-5)
        assert row["epsilon_spent"] == pytest.approx(independent, rel=1e-9)
    # g's cap is 3 now (floor(1.5 * 20 / 10)); nobody reached it, so the figures are the counts'
    check_metric_ledger(final_metric, counts, 0)


def test_a_report_without_participants_is_the_body_it_was() -> None:
    """A client-level or silo report (``participants`` absent) is the body the trainer sent
    before issue 29, so a trainer talking to an older service is not refused for a null key."""
    assert RoundReport(round_index=3, status="started").model_dump(mode="json") == {
        "round_index": 3, "status": "started", "aborted_pools": [], "metrics": {}}
    assert RoundReport(round_index=3, participants={"g": [1]}).model_dump(mode="json")["participants"] == {"g": [1]}


@pytest.mark.parametrize("scenario, changes", [
    (SILO_SCENARIO, {"silos": [{"id": "a", "epsilon": 2.0}]}),
    (METRIC_SCENARIO, {"groups": [{"id": "g", "leakage_budget": 2.0}]}),
])
def test_served_plans_and_replans_are_what_a_trainer_reads_and_verifies(
    client: TestClient, scenario: dict[str, Any], changes: dict[str, Any]
) -> None:
    """What ``--report-to`` fetches (``GET /v1/plans/{id}``, provenance fields included) is
    read by ``planner.units.load_plan_document`` and passes the unit's verifier, for a
    silo or metric plan and for its re-plan (which names its parent and starts later)."""
    from planner.units import load_plan_document, verify

    plan = client.post("/v1/plans", json={"scenario": scenario}).json()
    assert client.post(f"/v1/plans/{plan['id']}/rounds", json={"round_index": 0}).status_code == 201
    child = client.post(f"/v1/plans/{plan['id']}/replan", json={"changes": changes})
    assert child.status_code == 201, child.text
    for served_id, start, parent in ((plan["id"], 0, None), (child.json()["id"], 1, plan["id"])):
        document = load_plan_document(client.get(f"/v1/plans/{served_id}").json())
        verify(document)
        assert (document.privacy_unit, document.start_round, document.parent_plan_id) == (
            scenario["privacy_unit"], start, parent)


def test_a_completion_queued_behind_the_next_claim_is_not_refused(client: TestClient, trainer: TrainerLink) -> None:
    """The trainer claims round r + 1 before a queued completion of round r arrives
    (docs/ledger.md §6): the unknown round r + 1 must not push a client that reached its cap
    in round r over it, which would stop a correct run; the ledger still counts r + 1."""
    pid = client.post("/v1/plans", json={"scenario": METRIC_SCENARIO}).json()["id"]
    assert trainer.report(pid, 0, participants={"g": [0]}).status_code == 201
    assert trainer.report(pid, 1, "started").status_code == 201
    assert trainer.report(pid, 2, "started").status_code == 201
    late = trainer.report(pid, 1, participants={"g": [0]})  # client 0's second release: its cap
    assert late.status_code == 201, late.text
    check_metric_ledger(client.get(f"/v1/plans/{pid}/ledger").json(), {"g": {0: 2}}, 1)


def test_the_console_never_shows_a_superseded_plan_as_active(client: TestClient) -> None:
    """``GET /v1/console/plans/{id}`` of a plan that was re-planned: its lineage row says
    ``superseded_by`` the child and is not ``active`` (the page prints "(active)" for it); the
    child's view is active, with the parent before it."""
    pid = client.post("/v1/plans", json={"scenario": SILO_SCENARIO}).json()["id"]
    own = client.get(f"/v1/console/plans/{pid}").json()["lineage"]
    assert [(r["id"], r["active"]) for r in own] == [(pid, True)]
    child = client.post(f"/v1/plans/{pid}/replan", json={"rounds_done": 0, "changes": {"silos": [{"id": "a", "epsilon": 2.0}]}})
    assert child.status_code == 201, child.text
    cid = child.json()["id"]
    old = client.get(f"/v1/console/plans/{pid}").json()["lineage"]
    assert [(r["id"], r["superseded_by"], r["active"]) for r in old] == [(pid, cid, False)]
    new = client.get(f"/v1/console/plans/{cid}").json()["lineage"]
    assert [(r["id"], r["active"]) for r in new] == [(pid, False), (cid, True)]


def test_an_attached_trainer_reads_a_silo_or_metric_plans_ledger(client: TestClient) -> None:
    """``gdpfed train --plan-id ID --report-to URL`` on a silo or metric plan: the trainer's
    preflight reads the service's ledger as the plan's unit's (it failed with ``groups: Field
    required``, reading every ledger as a client-level one), and the fetched plan's unit reports
    (``tests/app/test_attached_units.py`` runs such trainers against a real server)."""
    from trainer.run.reporting import ServiceLink, fetch_service_plan
    from trainer.units.registry import unit_for

    link = ServiceLink("http://testserver", OPERATOR_TOKEN, client=client, attempts=1)
    for scenario, unit, method in ((SILO_SCENARIO, "silo_sample", None), (METRIC_SCENARIO, "metric_local", "metric_laplace")):
        pid = client.post("/v1/plans", json={"scenario": scenario, **({"method": method} if method else {})}).json()["id"]
        ledger = link.preflight(pid)
        assert (ledger.privacy_unit, ledger.rounds_counted, ledger.superseded_by) == (unit, 0, None)
        plan, _ = fetch_service_plan(link, pid, None)
        assert not unit_for(plan).reporting_refusal()
