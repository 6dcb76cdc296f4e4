"""Nothing lost, nothing doubled, across server processes (issue 15; docs/service.md §Deployment).

Real ``gdpfed serve`` processes (uvicorn) on one database, driven over HTTP by many
clients at once: trainers reporting the same rounds twice while operators change budgets
(each change re-plans the running plan) and several clients re-plan one plan together.
Afterwards the database holds every round exactly once, no group's budget is below what
it spent, and every 409 is checked against what the service knew. Then a server is killed
with SIGKILL in the middle of a burst of reports and restarted: the ledger holds every
acknowledged round, and nothing that was not sent.
"""

from __future__ import annotations

import copy
import os
import random
import signal
import threading
import time
from collections import Counter
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.app.conftest import OPERATOR_TOKEN, SMALL_SCENARIO, auth
from tests.app.test_e2e import Server, serve, start_server, stop_server

ROUNDS = 24  # rounds the trainers report (of the plan's 50)


def _client(server: Server) -> httpx.Client:
    return httpx.Client(base_url=server.base_url, headers=auth(OPERATOR_TOKEN), timeout=120)


def _ledger_rows(database_url: str) -> list[tuple[str, int]]:
    engine = create_engine(database_url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as connection:
            return [(row[0], int(row[1])) for row in connection.execute(
                text("SELECT plan_id, round_index FROM ledger_rounds"))]
    finally:
        engine.dispose()


class Trainer(threading.Thread):
    """Reports rounds 0..ROUNDS-1 in order, following re-plans as an attached trainer does."""

    def __init__(self, servers: list[Server], plan_id: str, seed: int) -> None:
        super().__init__()
        self.clients = [_client(s) for s in servers]
        self.plan_id = plan_id
        self.random = random.Random(seed)
        self.statuses: list[tuple[int, int, str]] = []  # (round, status, plan)
        self.superseded: list[tuple[int, str, dict[str, Any]]] = []  # (round, plan reported to, 409 body)
        self.errors: list[str] = []

    def run(self) -> None:
        try:
            for index in range(ROUNDS):
                while True:
                    client = self.random.choice(self.clients)  # any server process
                    response = client.post(f"/v1/plans/{self.plan_id}/rounds", json={"round_index": index})
                    if response.status_code == 409 and response.json()["code"] == "superseded":
                        self.superseded.append((index, self.plan_id, response.json()))
                        self.plan_id = response.json()["superseded_by"]
                        continue
                    if response.status_code == 503 and response.json()["code"] == "replanning":
                        time.sleep(0.2)
                        continue
                    self.statuses.append((index, response.status_code, self.plan_id))
                    if response.status_code not in (200, 201):
                        self.errors.append(f"round {index}: {response.status_code} {response.text}")
                    break
                time.sleep(self.random.uniform(0, 0.05))
        except Exception as exc:  # a thread's failure must fail the test, not vanish
            self.errors.append(repr(exc))
        finally:
            for client in self.clients:
                client.close()


def _epsilon_spent(client: httpx.Client, plan_id: str) -> dict[str, float | None]:
    ledger = client.get(f"/v1/plans/{plan_id}/ledger").json()
    return {g["id"]: g["epsilon_spent"] for g in ledger["groups"]}


@pytest.mark.timeout(900)
def test_server_processes_on_one_postgres_lose_and_double_nothing(postgres_url: str) -> None:
    servers = [start_server(postgres_url, initial_api_key=OPERATOR_TOKEN, args=("--compute-workers", "1"))
               for _ in range(3)]  # started together: one migrates, one creates the key
    try:
        for server in servers:
            server.wait_ready()
        clients = [_client(s) for s in servers]
        keys = clients[1].get("/v1/keys").json()
        assert [k["name"] for k in keys] == ["initial-operator"]

        population = clients[0].post("/v1/populations", json={"name": "p", "scenario": SMALL_SCENARIO}).json()
        population_id = population["id"]
        first_plan = clients[1].post(f"/v1/populations/{population_id}/plans").json()["id"]
        standalone = clients[2].post("/v1/plans", json={"scenario": SMALL_SCENARIO}).json()["id"]

        trainers = [Trainer(servers, first_plan, seed) for seed in range(2)]  # every round reported twice
        outcomes: list[tuple[str, int, dict[str, Any], dict[str, Any]]] = []
        replans: list[httpx.Response] = []
        lock = threading.Lock()

        def operator(seed: int) -> None:
            rng = random.Random(seed)
            with _client(servers[seed % 3]) as client:
                for step in range(3):
                    time.sleep(rng.uniform(0.2, 0.8))
                    active = client.get(f"/v1/populations/{population_id}").json()["active_plan_id"]
                    if step == 1:  # below what was spent: must be refused
                        spent = _epsilon_spent(client, active)["medium"] or 0.0
                        body = {"epsilon": spent / 2} if spent > 0 else {"epsilon": 2.0 + seed / 10}
                    else:
                        body = {"epsilon": round(1.0 + 0.1 * (seed + 1) * (step + 1), 3)}
                    group = "medium" if step == 1 else "strict"
                    response = client.patch(f"/v1/populations/{population_id}/groups/{group}", json=body)
                    with lock:
                        outcomes.append((group, response.status_code, body, response.json()))

        def replanner(seed: int) -> None:
            with _client(servers[seed % 3]) as client:
                response = client.post(f"/v1/plans/{standalone}/replan",
                                       json={"changes": {"groups": [{"id": "loose", "epsilon": 5.0}]}})
                with lock:
                    replans.append(response)

        threads = [*trainers, *(threading.Thread(target=operator, args=(s,)) for s in range(3)),
                   *(threading.Thread(target=replanner, args=(s,)) for s in range(4))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(600)
        assert not any(thread.is_alive() for thread in threads)
        for trainer in trainers:
            assert trainer.errors == []

        # Exact round counts: each round once in the database, one 201 and one duplicate 200.
        rows = [(plan, index) for plan, index in _ledger_rows(postgres_url) if plan != standalone]
        assert sorted(index for _, index in rows) == list(range(ROUNDS))
        statuses = Counter(code for t in trainers for _, code, _ in t.statuses)
        assert statuses == Counter({201: ROUNDS, 200: ROUNDS})
        recorded = {(plan, index) for t in trainers for index, code, plan in t.statuses if code == 201}
        assert recorded == set(rows)

        # Every superseded 409 named the re-plan of the plan reported to, which covers the round.
        for trainer in trainers:
            for index, reported_to, body in trainer.superseded:
                child = clients[0].get(f"/v1/plans/{body['superseded_by']}").json()
                assert child["parent_plan_id"] == reported_to
                assert child["start_round"] == body["start_round"] <= index

        # No budget is ever below what was spent: every plan of the chain, and the registry.
        final = clients[0].get(f"/v1/populations/{population_id}").json()
        chain = clients[0].get(f"/v1/plans?population_id={population_id}&limit=200").json()["items"]
        reported = 0
        for summary in chain:
            ledger = clients[1].get(f"/v1/plans/{summary['id']}/ledger").json()
            reported += ledger["rounds_reported"]
            for group in ledger["groups"]:
                if group["epsilon_spent"] is not None:
                    assert group["epsilon_spent"] <= group["epsilon"] * (1 + 1e-9)
        assert reported == ROUNDS
        final_spent = _epsilon_spent(clients[2], final["active_plan_id"])
        for group in final["scenario"]["groups"]:
            assert final_spent[group["id"]] <= group["epsilon"] * (1 + 1e-9)

        # Budget changes: accepted ones re-planned; every 409 justified by the ledger.
        assert len(outcomes) == 9
        for group, status, body, answer in outcomes:
            if status == 200:  # a re-plan that became the active plan, or nothing to change (same value)
                if answer["plan"] is None:
                    assert answer["changes"] == []
                else:
                    assert answer["population"]["active_plan_id"] == answer["plan"]["id"]
                continue
            assert status == 409, answer
            if answer["code"] == "budget_conflict":  # spending only grows: below the final spending
                assert answer["field"] == "epsilon" and body["epsilon"] < final_spent[group], answer
            else:  # the population kept changing under three retries: only under real contention
                assert answer["code"] == "conflict" and "kept changing" in answer["message"], answer
        assert any(answer.get("code") == "budget_conflict" for _, _, _, answer in outcomes)

        # One plan, re-planned by four clients at once: exactly one child, three justified 409s.
        created = [r for r in replans if r.status_code == 201]
        assert len(created) == 1 and len(replans) == 4
        child_id = created[0].json()["id"]
        for refused in (r for r in replans if r.status_code != 201):
            assert refused.status_code == 409 and child_id in refused.json()["message"]
        for client in clients:
            client.close()
    finally:
        for server in servers:
            stop_server(server)


@pytest.mark.timeout(600)
def test_kill_9_during_a_burst_loses_no_acknowledged_round(backend_url: str) -> None:
    scenario = copy.deepcopy(SMALL_SCENARIO)
    scenario["rounds"] = 5000
    sent: set[int] = set()
    acknowledged: set[int] = set()
    lock = threading.Lock()
    stop = threading.Event()
    with serve(backend_url, initial_api_key=OPERATOR_TOKEN) as server:
        with _client(server) as client:
            plan_id = client.post("/v1/plans", json={"scenario": scenario}).json()["id"]

        def reporter(offset: int) -> None:
            with _client(server) as client:
                for index in range(offset, 5000, 8):
                    if stop.is_set():
                        return
                    with lock:
                        sent.add(index)
                    try:
                        response = client.post(f"/v1/plans/{plan_id}/rounds", json={"round_index": index})
                    except httpx.HTTPError:
                        return  # the server is gone; this round may or may not have landed
                    if response.status_code in (200, 201):
                        with lock:
                            acknowledged.add(index)

        threads = [threading.Thread(target=reporter, args=(t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 120
        while len(acknowledged) < 60 and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(server.process.pid, signal.SIGKILL)  # mid-burst: requests are in flight
        server.process.wait()
        stop.set()
        for thread in threads:
            thread.join(60)
    assert len(acknowledged) >= 60

    with serve(backend_url, initial_api_key=OPERATOR_TOKEN) as server, _client(server) as client:
        rows = _ledger_rows(backend_url) if backend_url.startswith("postgresql") else None
        ledger = client.get(f"/v1/plans/{plan_id}/ledger").json()
        stored = {index for _, index in rows} if rows is not None else None
        if stored is None:
            import sqlite3

            with sqlite3.connect(backend_url.removeprefix("sqlite:///")) as connection:
                stored = {int(r[0]) for r in connection.execute("SELECT round_index FROM ledger_rounds")}
        assert acknowledged <= stored <= sent  # nothing acknowledged is lost, nothing unsent appears
        assert len(stored - acknowledged) <= 8  # at most the requests in flight at the kill
        assert ledger["rounds_reported"] == len(stored)
        # the trainers retry what was not acknowledged: each lands once
        for index in sorted(sent - acknowledged):
            response = client.post(f"/v1/plans/{plan_id}/rounds", json={"round_index": index})
            assert response.status_code == (200 if index in stored else 201)
        assert client.get(f"/v1/plans/{plan_id}/ledger").json()["rounds_reported"] == len(sent)
