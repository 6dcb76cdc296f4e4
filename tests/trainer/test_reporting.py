"""A trainer attached to the service (docs/ledger.md §6): it claims each round before running
it, completes it after, follows a re-plan named by a 409, never loses a report, and ends with
the service's ledger equal to its own. The service here is the real app (in process, through
its ASGI transport); ``tests/app/test_attached_trainer.py`` runs the CLI against a real server.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO, cast

import httpx
import pytest
import torch

from accounting.errors import InvalidInputError
from app.main import create_app
from app.settings import Settings
from planner.units import load_plan
from tests.trainer.trainer_plans import NullStream, comparable, quiet_progress
from trainer.run.checkpoint import load_checkpoint, save_checkpoint
from trainer.run.metrics import read_rounds
from trainer.run.progress import Progress
from trainer.run.reporting import ReportingStoppedError, RoundReporter, ServiceLink
from trainer.runner import TrainConfig, execute_run, prepare_run

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

TOKEN = "op-test-token-0123456789abcdefghijklmnopqrstuvwxyz"
SCENARIO = {
    "groups": [
        {"id": "strict", "epsilon": 2.0, "num_clients": 30},
        {"id": "loose", "epsilon": 8.0, "num_clients": 30},
    ],
    "delta": 1e-5,
    "rounds": 6,
    "clip_norm": 1.0,
    "model_dim": 1000,
    "expected_clients": 20,
    "keep_ratio": 1.0,
    "min_clients_per_pool": 2,
}
CONFIG = {"dataset": "digits", "model": "mlp", "model_options": {"hidden": [8]}, "local_steps": 1}


@pytest.fixture
def client(tmp_path: Path) -> Any:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'db.sqlite'}", initial_api_key=TOKEN)
    with TestClient(create_app(settings, announce_key=False), headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        yield c


def _link(client: Any) -> ServiceLink:
    return ServiceLink("http://testserver", TOKEN, client=client, backoff_s=0.0)


def _failing_completions(client: Any, flaky: dict[str, bool]) -> Callable[[httpx.Request], httpx.Response]:
    """A transport handler that forwards every request to ``client`` but answers a completion
    503 while ``flaky["fail"]``: the service unreachable for completions, claims going through."""

    def handler(request: httpx.Request) -> httpx.Response:
        if flaky["fail"] and b'"completed"' in request.content:
            return httpx.Response(503)
        response = client.request(request.method, str(request.url), content=request.content,
                                  headers=dict(request.headers))
        return httpx.Response(response.status_code, content=response.content, headers=response.headers)

    return handler


class BetweenRounds(Progress):
    """A quiet progress display that runs ``action()`` after the given global rounds."""

    def __init__(self, total: int, actions: dict[int, Any]) -> None:
        super().__init__(total, 0, stream=cast(TextIO, NullStream()), use_bar=False)
        self.actions = actions

    def round_done(self, record: Any) -> None:
        super().round_done(record)
        action = self.actions.get(record.round)
        if action is not None:
            action()


def _population_plan(client: Any, name: str = "p") -> dict[str, Any]:
    population = client.post("/v1/populations", json={"name": name, "scenario": SCENARIO})
    assert population.status_code == 201, population.text
    plan = client.post(f"/v1/populations/{population.json()['id']}/plans")
    assert plan.status_code == 201, plan.text
    return dict(plan.json())


def test_budget_change_mid_run_is_followed_and_both_ledgers_agree(client: Any, tmp_path: Path) -> None:
    """Issue 9 §2: PATCH strict after round 2 (2 -> 3); the run switches plans; nothing is refused or lost."""
    document = _population_plan(client)
    population_id = document["population_id"]

    def raise_strict() -> None:
        response = client.patch(f"/v1/populations/{population_id}/groups/strict", json={"epsilon": 3.0})
        assert response.status_code == 200, response.text

    reporter = RoundReporter(_link(client), document["id"])
    config = TrainConfig(**CONFIG, rounds=6)
    prepared = prepare_run(load_plan(document), document, config, tmp_path / "run")
    summary = execute_run(prepared, reporter=reporter, plan_id=document["id"],
                          progress=BetweenRounds(6, {2: raise_strict}))
    assert summary.complete and summary.rounds_run == 6 and summary.reports_pending == 0
    assert summary.superseded_plans == [document["id"]] and summary.plan_id != document["id"]
    assert summary.epsilon_target["strict"] == 3.0

    parent = client.get(f"/v1/plans/{document['id']}/ledger").json()
    child = client.get(f"/v1/plans/{summary.plan_id}/ledger").json()
    assert parent["rounds_counted"] == 3 and parent["superseded_by"] == summary.plan_id
    assert child["start_round"] == 3 and child["rounds_counted"] == 3 and child["rounds_reported"] == 3
    service_spent = {g["id"]: g["epsilon_spent"] for g in child["groups"]}
    for group, spent in summary.epsilon_spent.items():
        assert service_spent[group] == pytest.approx(spent, rel=1e-12), group
    assert 2.0 < service_spent["strict"] <= 3.0 * (1 + 1e-9)  # the raised budget is used
    # each round was claimed then completed exactly once, on the plan that ran it
    rounds = [r for r in (tmp_path / "run" / "rounds.jsonl").read_text().splitlines() if r]
    assert len(rounds) == 6


def test_resume_after_following_a_replan_continues_on_it_and_follows_one_made_while_down(
    client: Any, tmp_path: Path
) -> None:
    """Issue 25 §1: a run that followed a re-plan (strict 2 -> 3 after round 1, from round 2)
    is interrupted after round 3; strict is raised again (3 -> 4, from round 4) while it is
    down. ``--resume`` continues on the re-plan it was executing (it refused: "it starts at
    round 2, this run is at round 4"), follows the one made while it was down, and ends
    exactly as an uninterrupted run with the same two changes: parameters, log and
    ledger, the service's equal to the summary."""
    config = TrainConfig(**CONFIG, rounds=6)

    def raise_strict(document: dict[str, Any], epsilon: float) -> Any:
        def change() -> None:
            response = client.patch(f"/v1/populations/{document['population_id']}/groups/strict",
                                    json={"epsilon": epsilon})
            assert response.status_code == 200, response.text
        return change

    whole = _population_plan(client, "uninterrupted")
    prepared = prepare_run(load_plan(whole), whole, config, tmp_path / "whole")
    expected = execute_run(prepared, reporter=RoundReporter(_link(client), whole["id"]), plan_id=whole["id"],
                           progress=BetweenRounds(6, {1: raise_strict(whole, 3.0), 3: raise_strict(whole, 4.0)}))
    assert len(expected.superseded_plans) == 2

    document = _population_plan(client, "interrupted")

    def interrupt() -> None:
        raise KeyboardInterrupt

    prepared = prepare_run(load_plan(document), document, config, tmp_path / "run")
    with pytest.raises(KeyboardInterrupt):
        execute_run(prepared, reporter=RoundReporter(_link(client), document["id"]), plan_id=document["id"],
                    progress=BetweenRounds(6, {1: raise_strict(document, 3.0), 3: interrupt}))
    state = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert state["next_round"] == 4 and state["current_plan"]["start_round"] == 2
    raise_strict(document, 4.0)()  # the operator's second change lands while the run is down

    prepared = prepare_run(load_plan(document), document, config, tmp_path / "run", resume=True)
    summary = execute_run(prepared, reporter=RoundReporter(_link(client), document["id"]), plan_id=document["id"],
                          progress=quiet_progress(6))
    assert summary.complete and summary.rounds_run == 6 and summary.reports_pending == 0
    assert len(summary.superseded_plans) == 2 and summary.superseded_plans[0] == document["id"]
    assert summary.epsilon_target["strict"] == 4.0
    assert summary.epsilon_spent == expected.epsilon_spent
    assert torch.equal(load_checkpoint(tmp_path / "run" / "checkpoint.pt")["global_params"],
                       load_checkpoint(tmp_path / "whole" / "checkpoint.pt")["global_params"])
    records = read_rounds(tmp_path / "run" / "rounds.jsonl")
    assert [r.round for r in records] == list(range(6))
    assert comparable(records) == comparable(read_rounds(tmp_path / "whole" / "rounds.jsonl"))

    starts = [client.get(f"/v1/plans/{plan_id}/ledger").json()["start_round"]
              for plan_id in [*summary.superseded_plans, summary.plan_id]]
    assert starts == [0, 2, 4]
    last = client.get(f"/v1/plans/{summary.plan_id}/ledger").json()
    assert last["rounds_counted"] == 2 and last["rounds_reported"] == 2
    service_spent = {g["id"]: g["epsilon_spent"] for g in last["groups"]}
    assert service_spent == pytest.approx(summary.epsilon_spent, rel=1e-12)


def test_resume_refuses_a_checkpoint_whose_replan_starts_outside_the_run(client: Any, tmp_path: Path) -> None:
    """The plan a checkpoint was executing is verified again on resume: one that starts after
    the checkpoint's next round (a damaged checkpoint) is refused naming resume, before any round."""
    document = _population_plan(client)

    def raise_strict() -> None:
        response = client.patch(f"/v1/populations/{document['population_id']}/groups/strict", json={"epsilon": 3.0})
        assert response.status_code == 200, response.text

    def interrupt() -> None:
        raise KeyboardInterrupt

    config = TrainConfig(**CONFIG, rounds=6)
    prepared = prepare_run(load_plan(document), document, config, tmp_path / "run")
    with pytest.raises(KeyboardInterrupt):
        execute_run(prepared, reporter=RoundReporter(_link(client), document["id"]), plan_id=document["id"],
                    progress=BetweenRounds(6, {0: raise_strict, 1: interrupt}))
    path = tmp_path / "run" / "checkpoint.pt"
    state = load_checkpoint(path)
    assert state["next_round"] == 2 and state["current_plan"]["start_round"] == 1
    logged = (tmp_path / "run" / "rounds.jsonl").read_text()
    # moved to start after the next round, its rounds kept equal to what its scenario leaves
    # (else reading it refuses the rounds field first: planner.schema.check_scenario_fixed)
    moved_plan = json.loads(json.dumps(state["current_plan"]))
    moved_plan["start_round"], moved_plan["rounds"] = 3, moved_plan["rounds"] - 2
    for group in moved_plan["groups"]:  # its own phase, the last, shortened with it
        group["phases"][-1]["steps"] -= 2
    moved = {**state, "current_plan": moved_plan}
    beyond = {**state, "current_plan": {**state["current_plan"], "start_round": 7}}
    for tampered, field, message in ((moved, "resume", "starts at round 3, outside this run's rounds 0 to 2"),
                                     (beyond, "rounds", "states 5, but the plan's scenario fixes -1")):
        save_checkpoint(path, {name: value for name, value in tampered.items() if name != "format"})
        prepared = prepare_run(load_plan(document), document, config, tmp_path / "run", resume=True)
        with pytest.raises(InvalidInputError, match=message) as refused:
            execute_run(prepared, reporter=RoundReporter(_link(client), document["id"]), plan_id=document["id"],
                        progress=quiet_progress(6))
        assert refused.value.field == field
        assert (tmp_path / "run" / "rounds.jsonl").read_text() == logged


def test_resume_keeps_reporting_and_a_finished_run_delivers_what_is_pending(client: Any, tmp_path: Path) -> None:
    """Issue 9 §3: the reporting target is stored with the run; pending reports are delivered."""
    document = client.post("/v1/plans", json={"scenario": SCENARIO}).json()
    flaky = {"fail": False}

    handler = _failing_completions(client, flaky)

    transport_client = httpx.Client(transport=httpx.MockTransport(handler), base_url="http://testserver")
    reporter = RoundReporter(ServiceLink("http://testserver", TOKEN, client=transport_client, backoff_s=0.0),
                             document["id"])
    flaky["fail"] = True  # completions fail; claims go through
    config = TrainConfig(**CONFIG, rounds=6)
    prepared = prepare_run(load_plan(document), document, config, tmp_path / "run")
    summary = execute_run(prepared, reporter=reporter, plan_id=document["id"], progress=quiet_progress(6))
    assert summary.complete and summary.reports_pending == 6
    ledger = client.get(f"/v1/plans/{document['id']}/ledger").json()
    assert ledger["rounds_counted"] == 6  # the claims already count every round
    assert ledger["rounds_reported"] == 6
    state = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert [item["body"]["round_index"] for item in state["reporter"]["pending"]] == list(range(6))
    stored = (tmp_path / "run" / "reporting.json").read_text()
    assert document["id"] in stored and TOKEN not in stored

    flaky["fail"] = False
    resumed = RoundReporter(ServiceLink("http://testserver", TOKEN, client=transport_client, backoff_s=0.0),
                            document["id"])
    prepared = prepare_run(load_plan(document), document, config, tmp_path / "run", resume=True)
    summary = execute_run(prepared, reporter=resumed, plan_id=document["id"], progress=quiet_progress(6))
    assert summary.reports_pending == 0 and resumed.delivered == 6
    rounds = client.get(f"/v1/plans/{document['id']}/ledger").json()
    assert rounds["rounds_counted"] == 6
    assert load_checkpoint(tmp_path / "run" / "checkpoint.pt")["reporter"]["pending"] == []


def test_a_finished_run_that_followed_a_replan_delivers_its_pending_reports_on_resume(
    client: Any, tmp_path: Path
) -> None:
    """A run that followed a re-plan and finished with undelivered reports (exit 3, "rerun with
    --resume to deliver them") delivers them on resume; the resume refused before (the re-plan
    starts at round 2, "this run is at round 4"), so those rounds were never completed."""
    document = _population_plan(client)
    flaky = {"fail": False}

    handler = _failing_completions(client, flaky)

    def link() -> ServiceLink:
        proxy = httpx.Client(transport=httpx.MockTransport(handler), base_url="http://testserver")
        return ServiceLink("http://testserver", TOKEN, client=proxy, backoff_s=0.0)

    def raise_strict() -> None:
        response = client.patch(f"/v1/populations/{document['population_id']}/groups/strict", json={"epsilon": 3.0})
        assert response.status_code == 200, response.text

    def service_goes_flaky() -> None:
        flaky["fail"] = True

    config = TrainConfig(**CONFIG, rounds=4)
    prepared = prepare_run(load_plan(document), document, config, tmp_path / "run")
    summary = execute_run(prepared, reporter=RoundReporter(link(), document["id"]), plan_id=document["id"],
                          progress=BetweenRounds(4, {1: raise_strict, 2: service_goes_flaky}))
    assert summary.complete and summary.reports_pending == 1 and len(summary.superseded_plans) == 1

    flaky["fail"] = False
    resumed = RoundReporter(link(), document["id"])
    prepared = prepare_run(load_plan(document), document, config, tmp_path / "run", resume=True)
    summary = execute_run(prepared, reporter=resumed, plan_id=document["id"], progress=quiet_progress(4))
    assert summary.reports_pending == 0 and resumed.delivered == 1
    assert summary.superseded_plans == [document["id"]] and summary.plan_id != document["id"]
    ledger = client.get(f"/v1/plans/{summary.plan_id}/ledger").json()
    assert ledger["start_round"] == 2 and ledger["rounds_counted"] == 2 and ledger["rounds_reported"] == 2
    assert {g["id"]: g["epsilon_spent"] for g in ledger["groups"]} == pytest.approx(summary.epsilon_spent, rel=1e-12)
    assert load_checkpoint(tmp_path / "run" / "checkpoint.pt")["reporter"]["pending"] == []


def test_unreachable_service_stops_before_running_an_unclaimed_round(tmp_path: Path) -> None:
    document = None

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    from tests.trainer.trainer_plans import hand_plan

    plan = hand_plan([("a", 2.0, 12, 0.5)], [("pa", ["a"], 0.8, 2, 1.0)], rounds=2, model_dim=500)
    document = plan.model_dump(mode="json")
    link = ServiceLink("http://down", TOKEN, client=httpx.Client(transport=httpx.MockTransport(down)), backoff_s=0.0)
    config = TrainConfig(**CONFIG, rounds=2)
    prepared = prepare_run(plan, document, config, tmp_path / "run")
    with pytest.raises(ReportingStoppedError, match="cannot claim round 0.*not run"):
        execute_run(prepared, reporter=RoundReporter(link, "p1"), progress=quiet_progress(2))
    assert not (tmp_path / "run" / "rounds.jsonl").read_text().strip()


def test_refused_completion_stops_the_run_after_its_checkpoint(client: Any, tmp_path: Path) -> None:
    document = client.post("/v1/plans", json={"scenario": SCENARIO}).json()

    def handler(request: httpx.Request) -> httpx.Response:
        if b'"completed"' in request.content and b'"round_index":1' in request.content.replace(b" ", b""):
            return httpx.Response(422, json={"code": "invalid_input", "message": "aborted_pools: unknown"})
        response = client.request(request.method, str(request.url), content=request.content,
                                  headers=dict(request.headers))
        return httpx.Response(response.status_code, content=response.content, headers=response.headers)

    link = ServiceLink("http://testserver", TOKEN, client=httpx.Client(transport=httpx.MockTransport(handler)),
                       backoff_s=0.0)
    config = TrainConfig(**CONFIG, rounds=4)
    prepared = prepare_run(load_plan(document), document, config, tmp_path / "run")
    with pytest.raises(ReportingStoppedError, match="refused the report of round 1"):
        execute_run(prepared, reporter=RoundReporter(link, document["id"]), progress=quiet_progress(4))
    assert load_checkpoint(tmp_path / "run" / "checkpoint.pt")["next_round"] == 2


def _superseded_at_round_2(client: Any, successor: dict[str, Any], served: dict[str, Any] | None = None) -> ServiceLink:
    """A link to the in-process service whose claim of round 2 is answered ``superseded`` by
    ``successor``; with ``served``, fetching the successor returns that document instead."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and "/rounds" in request.url.path and b'"round_index":2' in request.content.replace(
                b" ", b""):
            return httpx.Response(409, json={"code": "superseded", "message": "re-planned", "field": "round_index",
                                             "superseded_by": successor["id"], "start_round": 2})
        if served is not None and request.method == "GET" and request.url.path.endswith(f"/plans/{successor['id']}"):
            return httpx.Response(200, json=served)
        response = client.request(request.method, str(request.url), content=request.content,
                                  headers=dict(request.headers))
        return httpx.Response(response.status_code, content=response.content, headers=response.headers)

    return ServiceLink("http://testserver", TOKEN, client=httpx.Client(transport=httpx.MockTransport(handler)),
                       backoff_s=0.0)


def test_successor_with_another_history_is_refused(client: Any, tmp_path: Path) -> None:
    """A re-plan whose spent phases are not what this run spent is never followed."""
    document = client.post("/v1/plans", json={"scenario": SCENARIO}).json()
    other = client.post("/v1/plans", json={"scenario": {**SCENARIO, "expected_clients": 12}}).json()

    link = _superseded_at_round_2(client, other)
    prepared = prepare_run(load_plan(document), document, TrainConfig(**CONFIG, rounds=4), tmp_path / "run")
    with pytest.raises(ReportingStoppedError, match="cannot follow the re-plan"):
        execute_run(prepared, reporter=RoundReporter(link, document["id"]), progress=quiet_progress(4))


def test_a_group_added_mid_run_stops_the_job_and_names_the_new_job_that_works(client: Any, tmp_path: Path) -> None:
    """An operator adds a group while a job runs: the job cannot follow (it cannot re-deal its
    clients) and every --resume meets the same re-plan, so the message said to resume once the
    cause is fixed, which cannot be done. It names the way on, a new job on the re-plan in a
    fresh directory, and that job's preflight accepts the re-plan and its ledger agrees."""
    from trainer.run.reporting import fetch_service_plan

    document = _population_plan(client, "grows")
    population_id = document["population_id"]
    replan: dict[str, Any] = {}

    def add_group() -> None:
        response = client.post(f"/v1/populations/{population_id}/groups",
                               json={"id": "late", "epsilon": 4.0, "num_clients": 10})
        assert response.status_code == 201, response.text
        replan.update(response.json()["plan"])

    config = TrainConfig(**CONFIG, rounds=6)
    prepared = prepare_run(load_plan(document), document, config, tmp_path / "run")
    with pytest.raises(ReportingStoppedError) as stopped:
        execute_run(prepared, reporter=RoundReporter(_link(client), document["id"]), plan_id=document["id"],
                    progress=BetweenRounds(6, {2: add_group}))
    way_on = (f"--resume cannot continue this run; start a new job on the re-plan in a fresh directory: "
              f"gdpfed train --plan-id {replan['id']} --report-to (the same service) --out NEW_DIR "
              "(it trains from round 3 on a new model)")
    assert "it changes the groups or their client counts" in stopped.value.message
    assert stopped.value.message.endswith(way_on), stopped.value.message
    prepared = prepare_run(load_plan(document), document, config, tmp_path / "run", resume=True)
    with pytest.raises(ReportingStoppedError) as again:
        execute_run(prepared, reporter=RoundReporter(_link(client), document["id"]), plan_id=document["id"],
                    progress=quiet_progress(6))
    assert again.value.message == stopped.value.message  # resuming meets the same re-plan

    # what the message says works: the preflight takes the re-plan, the job trains its rounds
    plan, fetched = fetch_service_plan(_link(client), replan["id"], None)
    prepared = prepare_run(plan, fetched, TrainConfig(**CONFIG, rounds=plan.rounds), tmp_path / "new")
    summary = execute_run(prepared, reporter=RoundReporter(_link(client), replan["id"]), plan_id=replan["id"],
                          progress=quiet_progress(6))
    assert summary.complete and summary.rounds_run == 3 and summary.reports_pending == 0
    ledger = client.get(f"/v1/plans/{replan['id']}/ledger").json()
    assert (ledger["start_round"], ledger["rounds_counted"]) == (3, 3)
    service_spent = {g["id"]: g["epsilon_spent"] for g in ledger["groups"]}
    assert set(service_spent) == {"strict", "loose", "late"}
    for group, spent in summary.epsilon_spent.items():
        assert service_spent[group] == pytest.approx(spent, rel=1e-12), group


def test_a_plan_partly_trained_by_a_finished_job_names_the_way_to_train_the_rest(client: Any, tmp_path: Path) -> None:
    """A CI job trained --rounds 2 of a 6-round plan: a new job on the plan is refused (its budget
    would be spent twice) and --resume cannot raise --rounds. The refusal said "continue that run
    with --resume, or plan again"; it names the re-plan of the rest, and that works."""
    from trainer.run.reporting import fetch_service_plan

    document = client.post("/v1/plans", json={"scenario": SCENARIO}).json()
    prepared = prepare_run(load_plan(document), document, TrainConfig(**CONFIG, rounds=2), tmp_path / "ci")
    assert execute_run(prepared, reporter=RoundReporter(_link(client), document["id"]), plan_id=document["id"],
                       progress=quiet_progress(2)).complete
    with pytest.raises(InvalidInputError) as refused:
        fetch_service_plan(_link(client), document["id"], None)
    assert refused.value.field == "plan-id"
    assert refused.value.reason.endswith(
        f"another run trained on it. Continue that run with --out ITS_DIR --resume (up to the --rounds it started "
        f"with); to train the plan's remaining rounds, re-plan them (an operator's POST /v1/plans/{document['id']}"
        "/replan, or a change to its population) and start a job on the re-plan: gdpfed train --plan-id NEW_ID "
        "--out NEW_DIR"), refused.value.reason

    replan = client.post(f"/v1/plans/{document['id']}/replan", json={})
    assert replan.status_code == 201, replan.text
    child = replan.json()
    assert (child["start_round"], child["rounds"]) == (2, 4)
    plan, fetched = fetch_service_plan(_link(client), child["id"], None)
    prepared = prepare_run(plan, fetched, TrainConfig(**CONFIG, rounds=plan.rounds), tmp_path / "rest")
    summary = execute_run(prepared, reporter=RoundReporter(_link(client), child["id"]), plan_id=child["id"],
                          progress=quiet_progress(6))
    assert summary.complete and summary.rounds_run == 4 and summary.reports_pending == 0
    ledger = client.get(f"/v1/plans/{child['id']}/ledger").json()
    assert ledger["rounds_counted"] == 4
    for group in ledger["groups"]:
        assert group["steps"] == 6  # the first job's 2 rounds and this job's 4, composed
        assert group["epsilon_spent"] == pytest.approx(summary.epsilon_spent[group["id"]], rel=1e-12)


def test_a_successor_that_contradicts_its_own_scenario_stops_the_run_as_unverified(
        client: Any, tmp_path: Path) -> None:
    """A re-plan from the service is checked like a plan file (its scenario-fixed fields
    included): one that fails stops reporting (exit 3, 'does not verify'), not as bad input."""
    document = client.post("/v1/plans", json={"scenario": SCENARIO}).json()
    other = client.post("/v1/plans", json={"scenario": SCENARIO}).json()
    tampered = json.loads(json.dumps(other))
    tampered["groups"][0]["epsilon"] = tampered["groups"][0]["epsilon"] * 10

    link = _superseded_at_round_2(client, other, served=tampered)
    prepared = prepare_run(load_plan(document), document, TrainConfig(**CONFIG, rounds=4), tmp_path / "run")
    with pytest.raises(ReportingStoppedError, match="does not verify: groups.*epsilon"):
        execute_run(prepared, reporter=RoundReporter(link, document["id"]), progress=quiet_progress(4))


def test_the_trainers_reporting_client_uses_the_served_models() -> None:
    """The bodies trainer.run.reporting sends and parses are the classes the service serves
    (planner.service_api), so the document and the trainer cannot drift."""
    import app.errors
    import app.schemas
    import planner.service_api as shared
    import planner.units
    from trainer.run import reporting

    for name in ("RoundReport", "KeyIdentity", "ErrorBody"):
        assert getattr(reporting, name) is getattr(shared, name), name
    # ledgers of every unit are read as their unit's served model (silo and metric runs report too)
    assert reporting.parse_ledger is planner.units.parse_ledger
    assert {unit.ledger_model for unit in planner.units.UNITS.values()} >= {shared.SiloLedgerOut, shared.MetricLedgerOut}
    assert app.schemas.RoundReport is shared.RoundReport and app.schemas.LedgerOut is shared.LedgerOut
    assert app.schemas.KeyIdentity is shared.KeyIdentity and app.errors.ErrorBody is shared.ErrorBody


def test_a_409_that_is_not_the_error_model_stops_the_run_with_its_text() -> None:
    """A claim refused with a body that is not ErrorBody (a proxy's page) is read through the
    model: the run stops with the page's text, not with a JSON decoding traceback."""

    def handler(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(409, text="<html>conflict at the proxy</html>")

    link = ServiceLink("http://testserver", TOKEN, client=httpx.Client(transport=httpx.MockTransport(handler)),
                       backoff_s=0.0)
    with pytest.raises(ReportingStoppedError, match="HTTP 409: <html>conflict at the proxy"):
        RoundReporter(link, "p1").claim(0)


def test_a_second_run_of_a_plan_is_refused_before_it_runs_a_round(client: Any, tmp_path: Path) -> None:
    """Two CI jobs started on one fresh plan both pass the preflight (the ledger counts nothing
    yet). Before, the second's claims were the first's duplicates (200) and it trained every round
    again with its own seed: two releases per round, one in the ledger. Each run states its
    identity (RoundReport.run_id, kept in reporting.json): the second is refused at its first
    claim, before round 0 runs, and the first resumes under its own identity."""
    from trainer.run.reporting import run_identity

    document = client.post("/v1/plans", json={"scenario": SCENARIO}).json()
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first = RoundReporter(_link(client), document["id"], run_id=run_identity(first_dir, False))
    second = RoundReporter(_link(client), document["id"], run_id=run_identity(second_dir, False))
    assert first.run_id != second.run_id
    prepared = prepare_run(load_plan(document), document, TrainConfig(**CONFIG, rounds=3), first_dir)
    assert execute_run(prepared, reporter=first, plan_id=document["id"], progress=quiet_progress(3)).complete
    assert json.loads((first_dir / "reporting.json").read_text())["run_id"] == first.run_id
    assert run_identity(first_dir, True) == first.run_id  # what --resume states

    prepared = prepare_run(load_plan(document), document, TrainConfig(**CONFIG, rounds=3, seed=1), second_dir)
    with pytest.raises(ReportingStoppedError) as refused:
        execute_run(prepared, reporter=second, plan_id=document["id"], progress=quiet_progress(3))
    assert "HTTP 409" in refused.value.message and "another run" in refused.value.message, refused.value.message
    assert read_rounds(second_dir / "rounds.jsonl") == []  # nothing of it ran
    ledger = client.get(f"/v1/plans/{document['id']}/ledger").json()
    assert ledger["rounds_counted"] == ledger["rounds_reported"] == 3

    # the first run's resume (its identity from reporting.json) is its own: its claims go through
    resumed = RoundReporter(_link(client), document["id"], first.secagg_mechanism, run_id=run_identity(first_dir, True))
    assert resumed.claim(2) is None


def test_a_held_or_failing_request_says_what_it_waits_for_before_each_wait() -> None:
    """While the service held a claim (503 with Retry-After: it re-plans) or a request failed
    and was retried, ServiceLink slept in silence: the user saw nothing for up to two minutes.
    It now says one line as it starts waiting (how long it may wait) and one before each retry
    (the attempt, of how many); what is retried, and how often, is unchanged."""
    answers: list[Any] = [
        httpx.Response(503, headers={"Retry-After": "0.05"}, json={"code": "held", "message": "re-planning"}),
        httpx.Response(503, headers={"Retry-After": "0.05"}, json={"code": "held", "message": "re-planning"}),
        httpx.Response(502, text="bad gateway"),
        httpx.ConnectError("connection refused"),
        httpx.Response(200, json={}),
    ]
    requests: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return cast(httpx.Response, answer)

    lines: list[str] = []
    link = ServiceLink("http://testserver", TOKEN, client=httpx.Client(transport=httpx.MockTransport(handler)),
                       backoff_s=0.0, log=lines.append, patience_s=30.0)
    assert RoundReporter(link, "p1").claim(0) is None
    assert len(requests) == 5 and not answers
    assert lines == [
        "POST /v1/plans/p1/rounds: the service at http://testserver holds requests (HTTP 503, Retry-After 0.05 s); "
        "waiting up to 30 s for it",
        "POST /v1/plans/p1/rounds to http://testserver failed (HTTP 502); retrying in 0 s (attempt 2 of 4)",
        "POST /v1/plans/p1/rounds to http://testserver failed (ConnectError: connection refused); retrying in 0 s "
        "(attempt 3 of 4)",
    ]

    # a claim that cannot be delivered still stops the run after the same attempts, each said
    lines.clear()
    answers[:] = [httpx.Response(500, text="down")] * 4
    requests.clear()
    with pytest.raises(ReportingStoppedError, match=r"cannot claim round 1 .*\(HTTP 500\)"):
        RoundReporter(link, "p1").claim(1)
    assert len(requests) == 4
    assert [line.rsplit("(", 1)[1] for line in lines] == ["attempt 2 of 4)", "attempt 3 of 4)", "attempt 4 of 4)"]

    # the preflight's retries are unsaid: its failure is the command's one line (exit 2)
    lines.clear()
    answers[:] = [httpx.Response(500, text="down")] * 4
    with pytest.raises(InvalidInputError, match="cannot reach the gdpfed service"):
        link.preflight("p1")
    assert lines == [] and not answers


def test_a_resumed_directory_of_an_older_trainer_delivers_its_pending_reports_under_its_new_identity(
    client: Any, tmp_path: Path
) -> None:
    """A run directory written before the run identity (its claims and queued completions state
    no run_id) resumes under a new identity, whose first claim binds the plan. Its queued
    completions, delivered after that claim, stated no run_id and were refused 409 at run_id
    since the service refuses id-less reports to a bound plan (d7bae6f): the run stopped at
    every resume and its reports were never delivered. They are this directory's reports, so
    they now state its identity."""
    from trainer.run.reporting import run_identity

    document = client.post("/v1/plans", json={"scenario": SCENARIO}).json()
    flaky = {"fail": True}

    handler = _failing_completions(client, flaky)

    def link() -> ServiceLink:
        return ServiceLink("http://testserver", TOKEN, client=httpx.Client(transport=httpx.MockTransport(handler)),
                           backoff_s=0.0)

    def interrupt() -> None:
        raise KeyboardInterrupt

    config = TrainConfig(**CONFIG, rounds=6)
    prepared = prepare_run(load_plan(document), document, config, tmp_path / "run")
    with pytest.raises(KeyboardInterrupt):  # an older trainer: no run_id; its completions queued
        execute_run(prepared, reporter=RoundReporter(link(), document["id"]), plan_id=document["id"],
                    progress=BetweenRounds(6, {2: interrupt}))
    pending = load_checkpoint(tmp_path / "run" / "checkpoint.pt")["reporter"]["pending"]
    assert [item["body"]["round_index"] for item in pending] == [0, 1, 2]
    assert all(item["body"].get("run_id") is None for item in pending)

    flaky["fail"] = False
    resumed = RoundReporter(link(), document["id"], run_id=run_identity(tmp_path / "run", True))
    prepared = prepare_run(load_plan(document), document, config, tmp_path / "run", resume=True)
    summary = execute_run(prepared, reporter=resumed, plan_id=document["id"], progress=quiet_progress(6))
    assert summary.complete and summary.reports_pending == 0 and resumed.delivered == 6
    ledger = client.get(f"/v1/plans/{document['id']}/ledger").json()
    assert ledger["rounds_counted"] == ledger["rounds_reported"] == 6
