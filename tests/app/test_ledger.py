"""The privacy ledger: rounds, idempotency, parent history, epsilon spent, concurrency."""

from __future__ import annotations

import random
import threading

import pytest

from accounting.epsilon import epsilon, epsilon_of_phases
from accounting.events import Phase
from app.deps import Principal
from app.schemas import RoundReport
from app.services import ledger as ledger_service
from tests.app.conftest import TestClient, hand_made_plan, store_plan


@pytest.fixture
def db_url(backend_url: str) -> str:
    """Every test here runs on SQLite and on PostgreSQL."""
    return backend_url

def _report(client: TestClient, plan_id: str, round_index: int, **extra: object):
    return client.post(f"/v1/plans/{plan_id}/rounds", json={"round_index": round_index, **extra})


def test_round_is_recorded_once(client: TestClient) -> None:
    plan_id = store_plan(client, hand_made_plan({"a": 0.1}, {"a": 1.5}, rounds=10))
    first = _report(client, plan_id, 3, metrics={"loss": 0.5}, aborted_pools=["Pa"])
    assert first.status_code == 201
    assert first.json()["duplicate"] is False and first.json()["reported_by"] == "initial-operator"
    again = _report(client, plan_id, 3, metrics={"loss": 9.0})
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert again.json()["metrics"] == {"loss": 0.5}  # the first record stands
    ledger = client.get(f"/v1/plans/{plan_id}/ledger").json()
    assert ledger["rounds_reported"] == 1 and ledger["last_round_index"] == 3


def test_round_index_is_global_and_bounded(client: TestClient) -> None:
    plan_id = store_plan(client, hand_made_plan({"a": 0.1}, {"a": 1.5}, rounds=10, start_round=20))
    for bad in (0, 19, 30):
        response = _report(client, plan_id, bad)
        assert response.status_code == 422 and response.json()["field"] == "round_index", bad
    assert _report(client, plan_id, 20).status_code == 201
    assert _report(client, plan_id, 29).status_code == 201


def test_unknown_pools_and_plans(client: TestClient) -> None:
    plan_id = store_plan(client, hand_made_plan({"a": 0.1}, {"a": 1.5}, rounds=10))
    response = _report(client, plan_id, 0, aborted_pools=["nope"])
    assert response.status_code == 422 and response.json()["field"] == "aborted_pools"
    assert _report(client, "missing", 0).json()["code"] == "not_found"
    assert client.get("/v1/plans/missing/ledger").status_code == 404


def test_non_finite_metrics_are_stored_as_null(client: TestClient) -> None:
    plan_id = store_plan(client, hand_made_plan({"a": 0.1}, {"a": 1.5}, rounds=10))
    response = client.post(f"/v1/plans/{plan_id}/rounds", content=b'{"round_index": 0, "metrics": {"loss": NaN}}',
                           headers={"Content-Type": "application/json"})
    assert response.status_code == 201 and response.json()["metrics"] == {"loss": None}


def test_epsilon_spent_counts_every_round_up_to_the_last(client: TestClient) -> None:
    """Aborted pools still count, and an unreported round before the last counts too."""
    plan_id = store_plan(client, hand_made_plan({"a": 0.05, "b": 0.2, "off": 0.0}, {"a": 1.5, "b": 0.9, "off": 2.0},
                                                rounds=100))
    for index in (0, 1, 2, 4):  # round 3 never reported
        assert _report(client, plan_id, index, aborted_pools=["Pa"]).status_code == 201
    ledger = client.get(f"/v1/plans/{plan_id}/ledger").json()
    assert ledger["rounds_reported"] == 4 and ledger["rounds_counted"] == 5
    groups = {g["id"]: g for g in ledger["groups"]}
    assert groups["a"]["phases"] == [{"sampling_rate": 0.05, "noise_multiplier": 1.5, "steps": 5}]
    assert groups["a"]["epsilon_spent"] == pytest.approx(epsilon(0.05, 1.5, 5, 1e-5).epsilon, rel=1e-12)
    assert groups["b"]["epsilon_spent"] == pytest.approx(epsilon(0.2, 0.9, 5, 1e-5).epsilon, rel=1e-12)
    assert groups["a"]["epsilon_remaining"] == pytest.approx(8.0 - groups["a"]["epsilon_spent"])
    assert groups["off"] | {"phases": [], "steps": 0, "epsilon_spent": 0.0} == groups["off"]


def test_history_composes_parent_plans(client: TestClient) -> None:
    parent = hand_made_plan({"a": 0.1, "b": 0.1}, {"a": 2.0, "b": 1.0}, rounds=100)
    parent_id = store_plan(client, parent)
    for index in range(10):
        _report(client, parent_id, index)
    # The child starts at round 15: rounds 10..14 of the parent are counted as spent
    # because the re-plan said so, even though they were never reported.
    spent = {g: [Phase(sampling_rate=0.1, noise_multiplier=s, steps=15)] for g, s in (("a", 2.0), ("b", 1.0))}
    child = hand_made_plan({"a": 0.1, "b": 0.3}, {"a": 2.0, "b": 1.0}, rounds=85, start_round=15, spent=spent)
    child_id = store_plan(client, child, parent_id=parent_id)
    refused = _report(client, parent_id, 15)  # belongs to the child
    assert refused.status_code == 409
    assert refused.json() | {"code": "superseded", "superseded_by": child_id, "start_round": 15} == refused.json()
    assert child_id in refused.json()["message"]
    assert _report(client, parent_id, 12).status_code == 201  # late report of a parent round
    for index in range(15, 20):
        _report(client, child_id, index)
    ledger = client.get(f"/v1/plans/{child_id}/ledger").json()
    groups = {g["id"]: g for g in ledger["groups"]}
    # Identical consecutive phases merge; changed ones stay separate.
    assert groups["a"]["phases"] == [{"sampling_rate": 0.1, "noise_multiplier": 2.0, "steps": 20}]
    assert groups["b"]["phases"] == [
        {"sampling_rate": 0.1, "noise_multiplier": 1.0, "steps": 15},
        {"sampling_rate": 0.3, "noise_multiplier": 1.0, "steps": 5},
    ]
    expected_b = epsilon_of_phases(
        [Phase(sampling_rate=0.1, noise_multiplier=1.0, steps=15), Phase(sampling_rate=0.3, noise_multiplier=1.0, steps=5)],
        1e-5,
    ).epsilon
    assert groups["b"]["epsilon_spent"] == pytest.approx(expected_b, rel=1e-12)
    assert client.get(f"/v1/plans/{parent_id}/ledger").json()["superseded_by"] == child_id


def test_concurrent_reports_neither_lose_nor_double_count(client: TestClient) -> None:
    """16 threads x 25 reports over 200 rounds: every round reported exactly twice."""
    rounds, threads, per_thread = 200, 16, 25
    plan_id = store_plan(client, hand_made_plan({"a": 0.05}, {"a": 1.2}, rounds=rounds))
    state = client.app.state.gdpfed  # type: ignore[attr-defined]
    indices = [i % rounds for i in range(threads * per_thread)]
    random.Random(7).shuffle(indices)
    results: list[bool] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def worker(mine: list[int]) -> None:
        start.wait()
        try:
            for index in mine:
                record = ledger_service.report_round(state, plan_id, RoundReport(round_index=index),
                                                     Principal("t", "operator"))
                with lock:
                    results.append(record.duplicate)
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=worker, args=(indices[t * per_thread:(t + 1) * per_thread],))
               for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    assert len(results) == threads * per_thread
    assert results.count(False) == rounds and results.count(True) == threads * per_thread - rounds
    ledger = client.get(f"/v1/plans/{plan_id}/ledger").json()
    assert ledger["rounds_reported"] == rounds and ledger["rounds_counted"] == rounds
    assert ledger["groups"][0]["epsilon_spent"] == pytest.approx(epsilon(0.05, 1.2, rounds, 1e-5).epsilon, rel=1e-12)
    text = client.get("/metrics").text
    assert f'gdpfed_ledger_updates_total{{result="recorded"}} {float(rounds)}' in text


def test_claimed_round_counts_then_completes_once(client: TestClient) -> None:
    """An attached trainer claims a round before running it (docs/ledger.md §4)."""
    plan_id = store_plan(client, hand_made_plan({"a": 0.1}, {"a": 1.5}, rounds=10))
    claim = _report(client, plan_id, 0, status="started")
    assert claim.status_code == 201 and claim.json()["status"] == "started" and not claim.json()["duplicate"]
    # a claim whose completion never arrives still counts: never under-count
    ledger = client.get(f"/v1/plans/{plan_id}/ledger").json()
    assert ledger["rounds_counted"] == 1
    assert ledger["groups"][0]["epsilon_spent"] == pytest.approx(epsilon(0.1, 1.5, 1, 1e-5).epsilon, rel=1e-12)
    again = _report(client, plan_id, 0, status="started")
    assert again.status_code == 200 and again.json()["duplicate"] is True
    done = _report(client, plan_id, 0, status="completed", metrics={"loss": 0.25}, aborted_pools=["Pa"])
    assert done.status_code == 201 and done.json()["duplicate"] is False
    assert done.json() | {"status": "completed", "metrics": {"loss": 0.25}, "aborted_pools": ["Pa"]} == done.json()
    twice = _report(client, plan_id, 0, metrics={"loss": 9.0})
    assert twice.json()["duplicate"] is True and twice.json()["metrics"] == {"loss": 0.25}
    late_claim = _report(client, plan_id, 0, status="started")
    assert late_claim.json()["duplicate"] is True and late_claim.json()["status"] == "completed"
    bad = _report(client, plan_id, 1, status="running")
    assert bad.status_code == 422 and bad.json()["field"] == "status"


def test_replan_starts_after_claimed_rounds_and_old_plan_refuses_later_ones(client: TestClient) -> None:
    """A round a trainer claimed before a re-plan stays with the old plan; later ones get 409."""
    created = client.post("/v1/plans", json={"scenario": {
        "groups": [{"id": "a", "epsilon": 2.0, "num_clients": 100}, {"id": "b", "epsilon": 4.0, "num_clients": 100}],
        "delta": 1e-5, "rounds": 20, "model_dim": 10, "expected_clients": 30}})
    assert created.status_code == 201, created.text
    plan_id = created.json()["id"]
    for index in range(3):
        assert _report(client, plan_id, index, status="completed").status_code == 201
    assert _report(client, plan_id, 3, status="started").status_code == 201  # in flight
    child = client.post(f"/v1/plans/{plan_id}/replan", json={"changes": {"groups": [{"id": "a", "epsilon": 3.0}]}})
    assert child.status_code == 201, child.text
    child_id = child.json()["id"]
    assert child.json()["start_round"] == 4  # after the claimed round
    # the claimed round completes on the old plan; the next one is refused, naming the child
    assert _report(client, plan_id, 3, status="completed").json()["duplicate"] is False
    refused = _report(client, plan_id, 4, status="started")
    assert refused.status_code == 409
    body = refused.json()
    assert body["code"] == "superseded" and body["superseded_by"] == child_id and body["start_round"] == 4
    assert body["field"] == "round_index"
    assert client.get(f"/v1/plans/{plan_id}").json()["superseded_by"] == child_id
    assert client.get(f"/v1/plans/{child_id}").json()["superseded_by"] is None
    assert _report(client, child_id, 4, status="started").status_code == 201
    # the child's history is the parent's four rounds then its own
    a = next(g for g in client.get(f"/v1/plans/{child_id}/ledger").json()["groups"] if g["id"] == "a")
    assert sum(p["steps"] for p in a["phases"]) == 5


def test_new_rounds_wait_while_the_plan_is_replanned(client: TestClient) -> None:
    """The re-plan fence: a claim past the count gets 503 + Retry-After; claimed rounds still complete."""
    plan_id = store_plan(client, hand_made_plan({"a": 0.1}, {"a": 1.5}, rounds=10))
    assert _report(client, plan_id, 0, status="started").status_code == 201
    state = client.app.state.gdpfed  # type: ignore[attr-defined]
    with ledger_service.replan_fence(state, plan_id):
        held = _report(client, plan_id, 1, status="started")
        assert held.status_code == 503 and held.headers["Retry-After"] == "1"
        assert held.json()["code"] == "replanning"
        assert _report(client, plan_id, 0, status="completed").json()["duplicate"] is False
        assert client.get(f"/v1/plans/{plan_id}/ledger").json()["rounds_counted"] == 1
    assert _report(client, plan_id, 1, status="started").status_code == 201


def test_a_stored_plan_of_the_old_default_reads_and_its_ledger_states_both_figures(client: TestClient) -> None:
    """A plan stored before pld became the default (rdp, no epsilon_rdp / epsilon_tight
    fields; tests/planner/data/plan-old-default-rdp.json as `gdpfed plan` wrote it at
    8f7b926) is served, and its ledger counts it under rdp with the tight figure beside."""
    import json
    from pathlib import Path

    from app.db import write_transaction
    from app.models import PlanRecord

    document = json.loads((Path(__file__).parents[1] / "planner" / "data" / "plan-old-default-rdp.json").read_text())
    state = client.app.state.gdpfed  # type: ignore[attr-defined]
    with write_transaction(state.sessions) as session:
        session.add(PlanRecord(id="old-default", created_by="test", method=document["method"], privacy_unit="client",
                               accountant="rdp", start_round=0, rounds=document["rounds"], document=document))
    assert client.get("/v1/plans/old-default").status_code == 200
    for index in range(3):
        assert _report(client, "old-default", index).status_code == 201
    ledger = client.get("/v1/plans/old-default/ledger").json()
    assert ledger["accountant"] == "rdp"
    for row in ledger["groups"]:
        assert row["epsilon_rdp"] == row["epsilon_spent"] > 0
        assert 0 < row["epsilon_tight"] < row["epsilon_rdp"]



def test_a_stored_skellam_plan_stating_the_gaussians_figures_keeps_working(client: TestClient) -> None:
    """A skellam plan stored by the release before the plans stated their Skellam figures (its
    groups state the continuous Gaussian's, below the blocks' ledger;
    tests/planner/data/plan-skellam-gaussian-figures.json, `gdpfed plan` at 99ba0bd) is served: its
    rounds are reported, its ledger counts the Skellam events (never the understated figure), and
    it is re-planned into a child that states its blocks' figures and verifies."""
    import json
    from pathlib import Path

    from app.db import write_transaction
    from app.models import PlanRecord
    from planner import ledger as plan_ledger
    from planner.units import load_plan
    from planner.verify import verify_executable

    document = json.loads(
        (Path(__file__).parents[1] / "planner" / "data" / "plan-skellam-gaussian-figures.json").read_text())
    plan = load_plan(document)
    state = client.app.state.gdpfed  # type: ignore[attr-defined]
    with write_transaction(state.sessions) as session:
        session.add(PlanRecord(id="old-skellam", created_by="test", method=document["method"], privacy_unit="client",
                               accountant=document["accountant"], start_round=0, rounds=document["rounds"],
                               document=document))
    assert client.get("/v1/plans/old-skellam").status_code == 200
    for index in range(3):
        assert _report(client, "old-skellam", index, secagg_mechanism="skellam").status_code == 201
    ledger = client.get("/v1/plans/old-skellam/ledger").json()
    assert ledger["secagg_mechanism"] == "skellam"
    for row in ledger["groups"]:
        assert row["epsilon_spent"] == plan_ledger.epsilon_spent(plan, plan.group(row["id"]), 3, mechanism="skellam")
    replanned = client.post("/v1/plans/old-skellam/replan", json={})
    assert replanned.status_code == 201, replanned.text
    child = load_plan(replanned.json())
    assert child.start_round == 3 and all(p.discrete is not None for p in child.pools if p.noise_multiplier > 0)
    assert verify_executable(child) == []  # the child states its blocks' figures


def test_a_prv_plans_skellam_ledger_is_labelled_with_the_accountant_that_priced_its_rows(client: TestClient) -> None:
    """prv cannot account the Skellam event: a prv plan's Skellam rows are priced by rdp
    (planner.ledger.history_accountant), so its skellam ledger says rdp, not prv; reported on the
    continuous shares its rows are prv's and say so."""
    import copy

    from planner import ledger as plan_ledger
    from planner.schema import SecaggMechanism
    from planner.units import load_plan
    from tests.app.conftest import SMALL_SCENARIO

    cases: list[tuple[SecaggMechanism, str]] = [("skellam", "rdp"), ("gaussian_continuous", "prv")]
    for mechanism, accountant in cases:
        scenario = {**copy.deepcopy(SMALL_SCENARIO), "accountant": "prv", "rounds": 5}
        created = client.post("/v1/plans", json={"scenario": scenario})
        assert created.status_code == 201, created.text
        plan = load_plan(created.json())
        assert plan.accountant == "prv" and any(p.discrete is not None for p in plan.pools)
        assert _report(client, created.json()["id"], 0, secagg_mechanism=mechanism).status_code == 201
        ledger = client.get(f"/v1/plans/{created.json()['id']}/ledger").json()
        assert ledger["secagg_mechanism"] == mechanism and ledger["accountant"] == accountant, mechanism
        for row in ledger["groups"]:
            group = plan.group(row["id"])
            assert plan_ledger.ledger_accountant(plan_ledger.history_accountant(plan, group, mechanism)) == accountant
            assert row["epsilon_spent"] == plan_ledger.epsilon_spent(plan, group, 1, mechanism=mechanism)


def test_the_console_labels_a_prv_populations_skellam_figures_with_the_accountant_that_priced_them(
    client: TestClient,
) -> None:
    """The console's population view states the figures of the ledger's rows
    (``GET /v1/plans/{id}/ledger``) and names the same accountant: rdp for a prv plan's Skellam
    rows (prv cannot account the Skellam event), prv on the continuous shares. Before, the
    population view named the plan's accountant, "accountant prv", above rdp's figures."""
    import copy

    from tests.app.conftest import SMALL_SCENARIO

    for mechanism, accountant in (("skellam", "rdp"), ("gaussian_continuous", "prv")):
        scenario = {**copy.deepcopy(SMALL_SCENARIO), "accountant": "prv", "rounds": 5}
        population = client.post("/v1/populations", json={"name": f"prv-{mechanism}", "scenario": scenario})
        assert population.status_code == 201, population.text
        plan = client.post(f"/v1/populations/{population.json()['id']}/plans")
        assert plan.status_code == 201, plan.text
        assert _report(client, plan.json()["id"], 0, secagg_mechanism=mechanism).status_code == 201
        ledger = client.get(f"/v1/plans/{plan.json()['id']}/ledger").json()
        assert ledger["accountant"] == accountant, mechanism
        view = client.get(f"/v1/console/populations/{population.json()['id']}").json()
        assert view["unit"].endswith(f"accountant {accountant}"), (mechanism, view["unit"])
        assert [g["epsilon_spent"] for g in view["groups"]] == [g["epsilon_spent"] for g in ledger["groups"]]


def test_a_plans_rounds_are_bound_to_the_first_run_that_states_its_identity(client: TestClient) -> None:
    """``run_id`` (docs/ledger.md §4): the first report stating one binds the plan; the same run's
    repeated claims and completions go through, another run's claim, even of a round already
    claimed (a duplicate before), is 409 at run_id and records nothing; a report without the
    field is refused once the plan is bound (the test below); a re-plan is bound by its own first report."""
    plan_id = store_plan(client, hand_made_plan({"a": 0.1}, {"a": 1.5}, rounds=10))
    first, second = "run-first-0123456789", "run-second-0123456789"
    assert _report(client, plan_id, 0, status="started", run_id=first).status_code == 201
    assert _report(client, plan_id, 0, status="started", run_id=first).json()["duplicate"] is True
    for index in (0, 1):
        refused = _report(client, plan_id, index, status="started", run_id=second)
        assert refused.status_code == 409, refused.text
        assert (refused.json()["code"], refused.json()["field"]) == ("conflict", "run_id")
        assert "another run" in refused.json()["message"] and first in refused.json()["message"]
    assert _report(client, plan_id, 0, status="completed", run_id=first).json()["duplicate"] is False
    assert _report(client, plan_id, 1, run_id=first).status_code == 201
    ledger = client.get(f"/v1/plans/{plan_id}/ledger").json()
    assert ledger["rounds_counted"] == ledger["rounds_reported"] == 2
    assert _report(client, plan_id, 2, run_id="bad id!").status_code == 422
    child = client.post(f"/v1/plans/{plan_id}/replan", json={})
    assert child.status_code == 201, child.text
    assert _report(client, child.json()["id"], 2, status="started", run_id=second).status_code == 201
    assert _report(client, child.json()["id"], 3, status="started", run_id=first).status_code == 409


def test_a_report_without_a_run_id_is_refused_once_the_plan_is_bound_to_a_run(client: TestClient) -> None:
    """docs/ledger.md §4: before any run states its identity, reports without one (older trainers)
    are taken; once the first report that states one binds the plan, a report without one is 409
    ``conflict`` at ``run_id`` in one line and records nothing: a new claim, a completion (of a new
    round or of the bound run's claim) and a duplicate alike. Before, it was recorded (201): an older
    trainer or a second job without an id added rounds that the bound run releases again."""
    plan_id = store_plan(client, hand_made_plan({"a": 0.1}, {"a": 1.5}, rounds=10))
    assert _report(client, plan_id, 0).status_code == 201  # no run bound yet: an older trainer's report
    bound = "run-bound-0123456789"
    assert _report(client, plan_id, 1, status="started", run_id=bound).status_code == 201
    for index, status in ((2, "started"), (3, "completed"), (1, "completed"), (0, "completed")):
        refused = _report(client, plan_id, index, status=status)
        assert refused.status_code == 409, (index, status, refused.text)
        body = refused.json()
        assert (body["code"], body["field"]) == ("conflict", "run_id"), body
        assert bound in body["message"] and "\n" not in body["message"], body
    ledger = client.get(f"/v1/plans/{plan_id}/ledger").json()
    assert ledger["rounds_counted"] == 2 and ledger["last_round_index"] == 1, ledger
    completed = _report(client, plan_id, 1, run_id=bound)  # the bound run completes its own claim
    assert completed.status_code == 201 and completed.json()["duplicate"] is False, completed.text


def test_a_report_invalid_for_its_plan_is_422_before_the_run_binding_refuses_it(client: TestClient) -> None:
    """docs/service.md §Errors, validation before state: a report whose body its plan cannot take
    (participants on a client-level plan, a round_index outside the plan) is 422 naming that
    field, also from a report the run binding refuses (409 at run_id: without a run_id since
    d7bae6f, or of another run), which named run_id and hid the body's error behind it."""
    plan_id = store_plan(client, hand_made_plan({"a": 0.1}, {"a": 1.5}, rounds=10))
    bound = "run-bound-0123456789"
    assert _report(client, plan_id, 0, status="started", run_id=bound).status_code == 201
    for run in ({}, {"run_id": "run-other-0123456789"}):
        bad = _report(client, plan_id, 1, participants={"a": [1]}, **run)
        assert (bad.status_code, bad.json()["field"]) == (422, "participants"), (run, bad.text)
        bad = _report(client, plan_id, 10, **run)
        assert (bad.status_code, bad.json()["field"]) == (422, "round_index"), (run, bad.text)
        # a body this plan takes is still refused by the binding
        refused = _report(client, plan_id, 1, **run)
        assert (refused.status_code, refused.json()["field"]) == (409, "run_id"), (run, refused.text)
    assert client.get(f"/v1/plans/{plan_id}/ledger").json()["rounds_counted"] == 1
