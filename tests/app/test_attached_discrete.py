"""``gdpfed train --secagg-mechanism skellam --report-to URL`` against a real ``gdpfed serve``.

Issue 27 (service side): a run on the discrete distributed mechanism is reported, and the
service's ledger counts exactly what it executes, each pool's Poisson-subsampled Skellam
event at delta less the wrap-around bound, through ``planner.ledger`` (the functions the
trainer's tally uses), so it stays equal to the run's summary.json. The plans are made by
the service from a scenario with ``report_discrete: true``. Here: a reported run (SQLite and
PostgreSQL) whose ledger equals summary.json with each round once in rounds.jsonl and once
in the database; a run killed with SIGKILL and resumed, and one killed after following a
budget change's re-plan and resumed on it; a mechanism mismatch and the other
refusals (409/422 naming ``secagg_mechanism``), and a report without the field (an older
reporter) counted as the continuous mechanism, labelled approximate.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from app import cli as app_cli
from app.db import parse_database_url
from planner import ledger as plan_ledger
from planner.schema import MECHANISM_LABELS
from planner.units import load_plan
from tests.app.test_attached_resume import (  # noqa: F401  (service: the fixture of a restartable gdpfed serve)
    KILLED,
    Service,
    assert_ledgers_agree,
    logged_rounds,
    raise_budget,
    resume,
    service,
    train,
)
from tests.app.test_attached_trainer import TINY
from tests.app.test_attached_units import SILO_SCENARIO
from tests.app.test_e2e import serve
from tests.trainer.test_reporting import SCENARIO as ATTACHED_SCENARIO

pytest.importorskip("torch")

# the tiny model has 610 parameters: padded to 1024 like the scenario's 1000 (the blocks' d')
DISCRETE_SCENARIO = {**ATTACHED_SCENARIO, "report_discrete": True}
SKELLAM = ["--secagg-mechanism", "skellam"]


@pytest.fixture(autouse=True)
def only_train(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app_cli, "SUBCOMMAND_MODULES", {"train": "trainer.cli"})
    monkeypatch.delenv("GDPFED_API_KEY", raising=False)


@pytest.fixture
def server(backend_url: str) -> Iterator[Any]:
    with serve(backend_url) as running:
        found = re.search(r"^\s+(gdpfed_\S+)$", "".join(running.stderr), re.MULTILINE)
        assert found is not None
        running.token = found.group(1)  # type: ignore[attr-defined]
        running.database_url = backend_url  # type: ignore[attr-defined]
        yield running


def _api(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120)


def _population_plan(api: httpx.Client, scenario: dict[str, Any], rounds: int) -> dict[str, Any]:
    population = api.post("/v1/populations", json={"name": "discrete", "scenario": {**scenario, "rounds": rounds}})
    assert population.status_code == 201, population.text
    plan = api.post(f"/v1/populations/{population.json()['id']}/plans")
    assert plan.status_code == 201, plan.text
    document = dict(plan.json())
    assert all(pool["discrete"] is not None for pool in document["pools"] if pool["noise_multiplier"] > 0), document
    return document


def _database_rows(database_url: str, plan_id: str) -> list[tuple[Any, ...]]:
    engine = create_engine(parse_database_url(database_url))
    try:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT round_index, status FROM ledger_rounds WHERE plan_id = :p "
                                           "ORDER BY round_index"), {"p": plan_id}).fetchall()
            mechanism: Any = connection.execute(text("SELECT secagg_mechanism FROM plans WHERE id = :p"),
                                           {"p": plan_id}).scalar_one()
    finally:
        engine.dispose()
    return [(mechanism, *row) for row in rows]


def assert_counts_skellam(ledger: dict[str, Any], document: dict[str, Any], summary: dict[str, Any]) -> None:
    """The ledger states the discrete mechanism and its threat models, counts each group's
    Skellam event (not a Gaussian phase), equals summary.json in all three figures, and
    differs from what the continuous mechanism would have spent."""
    plan = load_plan(document)
    rounds = ledger["rounds_counted"]
    assert ledger["secagg_mechanism"] == "skellam" and ledger["mechanism_label"] == MECHANISM_LABELS["skellam"]
    assert ledger["label"] == "client-level" and ledger["notion"] == summary["notion"]
    for row in ledger["groups"]:
        group = plan.group(row["id"])
        block = plan.pool(group.pool).discrete
        assert block is not None
        assert row["secagg_mechanism"] == "skellam" and row["threat_model"] == block.threat_model
        assert row["phases"] == [] and len(row["events"]) == 1 and row["events"][0]["steps"] == rounds
        assert row["delta_accounted"] == pytest.approx(plan.scenario.delta - rounds * block.wrap_probability_per_round,
                                                       rel=1e-12)
    for figure in ("epsilon_spent", "epsilon_rdp", "epsilon_tight"):
        served = {row["id"]: row[figure] for row in ledger["groups"]}
        assert served == pytest.approx(summary[figure], rel=1e-12), figure
    continuous = plan_ledger.spent_by_group(plan, rounds)
    assert all(continuous[g] != ledger_value for g, ledger_value in summary["epsilon_spent"].items())


def test_a_reported_skellam_run_keeps_the_service_ledger_equal_to_its_summary(server: Any, tmp_path: Path,
                                                                           capsys: Any) -> None:
    api = _api(server.base_url, server.token)
    document = _population_plan(api, DISCRETE_SCENARIO, 4)
    out = tmp_path / "run"
    code = app_cli.run(["train", "--plan-id", document["id"], "--report-to", server.base_url, "--api-key",
                        server.token, *TINY, *SKELLAM, "--out", str(out), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    assert summary["complete"] and summary["rounds_run"] == 4 and summary["reports_pending"] == 0
    assert summary["secagg_mechanism"] == "skellam"

    ledger = api.get(f"/v1/plans/{document['id']}/ledger").json()
    assert ledger["rounds_counted"] == 4 and ledger["rounds_reported"] == 4
    assert_counts_skellam(ledger, document, summary)
    assert logged_rounds(out) == [0, 1, 2, 3]
    assert _database_rows(server.database_url, document["id"]) == [
        ("skellam", index, "completed") for index in range(4)
    ]

    # the console says which mechanism and which threat model the figures hold under
    view = api.get(f"/v1/console/populations/{document['population_id']}").json()
    assert view["mechanism"].startswith(f"noise mechanism: {MECHANISM_LABELS['skellam']}; threat model: ")
    assert ledger["groups"][0]["threat_model"] in view["mechanism"]
    assert {g["id"]: g["epsilon_spent"] for g in view["groups"]} == pytest.approx(summary["epsilon_spent"], rel=1e-12)
    assert view["series"]["epsilon_spent"]["strict"][-1] == pytest.approx(summary["epsilon_spent"]["strict"], rel=1e-12)
    plan_view = api.get(f"/v1/console/plans/{document['id']}").json()
    assert plan_view["mechanism"] == view["mechanism"] and plan_view["label"] == "client-level"

    # the run keeps its mechanism: a report of another is refused; an older reporter's, which states
    # neither mechanism nor run, is refused for its missing run_id (the plan is bound to the run)
    run_id = json.loads((out / "reporting.json").read_text())["run_id"]
    for body in ({"round_index": 3, "run_id": run_id},
                 {"round_index": 3, "secagg_mechanism": "gaussian_continuous", "run_id": run_id}):
        refused = api.post(f"/v1/plans/{document['id']}/rounds", json=body)
        assert refused.status_code == 409 and refused.json()["field"] == "secagg_mechanism", refused.text
        assert "skellam" in refused.json()["message"]
    refused = api.post(f"/v1/plans/{document['id']}/rounds", json={"round_index": 3})
    assert refused.status_code == 409 and refused.json()["field"] == "run_id", refused.text
    # the run is done: a budget change is refused for want of rounds, not for its mechanism (a
    # skellam run's plan is re-planned on its Skellam events: the POST /replan case below)
    change = api.patch(f"/v1/populations/{document['population_id']}/groups/strict", json={"epsilon": 3.0})
    assert change.status_code == 409 and change.json()["field"] == "changes.rounds", change.text
    assert api.get(f"/v1/plans/{document['id']}/ledger").json() == ledger
    api.close()


def test_mechanism_refusals_and_a_report_without_the_field(server: Any) -> None:
    api = _api(server.base_url, server.token)
    # an older reporter says no mechanism: the continuous one, labelled approximate
    continuous = _population_plan(api, DISCRETE_SCENARIO, 4)
    assert api.post(f"/v1/plans/{continuous['id']}/rounds", json={"round_index": 0}).status_code == 201
    ledger = api.get(f"/v1/plans/{continuous['id']}/ledger").json()
    assert ledger["secagg_mechanism"] == "gaussian_continuous" and "approximate" in ledger["mechanism_label"]
    assert all(row["secagg_mechanism"] == "gaussian_continuous" and row["threat_model"] is None
               and row["events"] == [] and len(row["phases"]) == 1 for row in ledger["groups"])
    assert ledger["groups"][0]["epsilon_spent"] == pytest.approx(
        plan_ledger.spent_by_group(load_plan(continuous), 1)[ledger["groups"][0]["id"]], rel=1e-12)
    claim = api.post(f"/v1/plans/{continuous['id']}/rounds", json={"round_index": 1, "secagg_mechanism": "skellam"})
    assert claim.status_code == 409 and claim.json()["field"] == "secagg_mechanism", claim.text
    assert "gaussian_continuous" in claim.json()["message"]
    assert api.get(f"/v1/plans/{continuous['id']}/ledger").json()["rounds_counted"] == 1

    # skellam on a plan without discrete blocks (the continuous path, named) would be counted as
    # Gaussian phases: refused
    plain = api.post("/v1/plans", json={"scenario": {**ATTACHED_SCENARIO, "secagg_mechanism": "gaussian_continuous"}}).json()
    refused = api.post(f"/v1/plans/{plain['id']}/rounds", json={"round_index": 0, "secagg_mechanism": "skellam"})
    assert refused.status_code == 422 and refused.json()["field"] == "secagg_mechanism", refused.text
    assert "secagg_mechanism: skellam" in refused.json()["message"]
    assert api.get(f"/v1/plans/{plain['id']}/ledger").json()["secagg_mechanism"] is None

    # a plan without a population whose run is on skellam is re-planned on its Skellam events (POST /replan)
    discrete = api.post("/v1/plans", json={"scenario": DISCRETE_SCENARIO}).json()
    report = {"round_index": 0, "secagg_mechanism": "skellam"}
    assert api.post(f"/v1/plans/{discrete['id']}/rounds", json=report).status_code == 201
    replanned = api.post(f"/v1/plans/{discrete['id']}/replan",
                         json={"changes": {"groups": [{"id": "strict", "epsilon": 3.0}]}})
    assert replanned.status_code in (200, 201), replanned.text
    assert sum(e.steps for e in load_plan(replanned.json()).group("strict").spent_discrete) == 1

    # a unit without secure-aggregation noise refuses the field; an unknown mechanism is a 422
    silo = api.post("/v1/plans", json={"scenario": SILO_SCENARIO}).json()
    refused = api.post(f"/v1/plans/{silo['id']}/rounds", json={"round_index": 0, "secagg_mechanism": "skellam"})
    assert refused.status_code == 422 and refused.json()["field"] == "secagg_mechanism", refused.text
    refused = api.post(f"/v1/plans/{plain['id']}/rounds", json={"round_index": 0, "secagg_mechanism": "laplace"})
    assert refused.status_code == 422 and refused.json()["field"] == "secagg_mechanism", refused.text
    api.close()


def test_a_skellam_run_killed_mid_run_resumes_with_the_ledger_equal_to_its_summary(
        service: Service, tmp_path: Path) -> None:  # noqa: F811  (the imported fixture)
    """kill -9 after round 2's report was acknowledged, before its checkpoint; ``--resume`` re-runs
    round 2 (its claim and report are no-ops at the service) and finishes on skellam."""
    with service.api() as api:
        document = _population_plan(api, DISCRETE_SCENARIO, 5)
    out = tmp_path / "run"
    killed = train(service, {"checkpoint:3": ["kill"]}, "--plan-id", document["id"], "--report-to", service.url,
                   *TINY, *SKELLAM, "--out", str(out))
    assert killed.returncode == KILLED, killed.stderr
    assert logged_rounds(out) == [0, 1, 2]
    with service.api() as api:
        ledger = api.get(f"/v1/plans/{document['id']}/ledger").json()
    assert ledger["rounds_counted"] == 3 and ledger["secagg_mechanism"] == "skellam"

    resumed = resume(service, out)
    assert resumed.returncode == 0, resumed.stderr
    summary, ledgers = assert_ledgers_agree(service, out, 5)
    assert [entry["plan_id"] for entry in ledgers] == [document["id"]] and summary["secagg_mechanism"] == "skellam"
    assert_counts_skellam(ledgers[0], document, summary)


def test_a_skellam_run_killed_after_following_a_replan_resumes_with_the_ledger_equal_to_its_summary(
        service: Service, tmp_path: Path) -> None:  # noqa: F811  (the imported fixture)
    """Issue 27: after round 0 of a skellam run the operator lowers strict's budget to what its Skellam
    event spent (above the Gaussian record of that round since the lattice search: the blocks sit on the
    continuous answer's lattice point at delta less the wrap charge): the population's re-plan is computed
    for the run's reported mechanism, so it is accepted with strict exhausted and records the Skellam
    event of round 0 (tests/app/test_plans.py checks the budgets between the two records). The run follows the child on
    its blocks and is killed after round 2's report was acknowledged, before its checkpoint; ``--resume``
    re-runs round 2 on the child and finishes: the child's ledger equals summary.json in all three
    figures (each group's spent Skellam event, then the child's own), strict stays within its lowered
    budget, and every round is once in rounds.jsonl and once in the database."""
    with service.api() as api:
        document = _population_plan(api, DISCRETE_SCENARIO, 5)
    parent = load_plan(document)
    gaussian = plan_ledger.epsilon_spent(parent, parent.group("strict"), 1)
    skellam = plan_ledger.epsilon_spent(parent, parent.group("strict"), 1, mechanism="skellam")
    assert gaussian is not None and skellam is not None and gaussian < skellam
    lowered = skellam
    out = tmp_path / "run"
    killed = train(service, {"checkpointed:1": [raise_budget(document, lowered)], "checkpoint:3": ["kill"]},
                   "--plan-id", document["id"], "--report-to", service.url, *TINY, *SKELLAM, "--out", str(out))
    assert killed.returncode == KILLED, killed.stderr
    assert "re-planned as" in killed.stderr
    assert logged_rounds(out) == [0, 1, 2]
    with service.api() as api:
        first = api.get(f"/v1/plans/{document['id']}/ledger").json()
        child_document = api.get(f"/v1/plans/{first['superseded_by']}").json()
    assert first["rounds_counted"] == 1 and first["secagg_mechanism"] == "skellam"
    child = load_plan(child_document)
    assert child.start_round == 1 and all(len(g.spent_discrete) == 1 for g in child.groups)
    assert child.group("strict").status == "exhausted" and child.group("loose").sampling_rate > 0

    resumed = resume(service, out)
    assert resumed.returncode == 0, resumed.stderr
    summary, ledgers = assert_ledgers_agree(service, out, 5)
    assert [entry["plan_id"] for entry in ledgers] == [document["id"], child_document["id"]]
    assert summary["secagg_mechanism"] == "skellam" and summary["epsilon_target"]["strict"] == lowered
    ledger = ledgers[-1]
    assert ledger["secagg_mechanism"] == "skellam" and ledger["rounds_counted"] == 4
    for row in ledger["groups"]:
        group = child.group(row["id"])
        block = child.pool(group.pool).discrete
        assert [event["steps"] for event in row["events"]] == ([1, 4] if group.sampling_rate > 0 else [1])
        charged = 0.0 if block is None else 4 * block.wrap_probability_per_round
        assert row["delta_accounted"] == pytest.approx(
            child.scenario.delta - group.spent_wrap_probability - charged, rel=1e-12)
    for figure in ("epsilon_spent", "epsilon_rdp", "epsilon_tight"):
        served = {row["id"]: row[figure] for row in ledger["groups"]}
        assert served == pytest.approx(summary[figure], rel=1e-12), figure
    assert summary["epsilon_spent"]["strict"] == pytest.approx(skellam, rel=1e-12)
    assert summary["epsilon_spent"]["strict"] <= lowered
    assert _database_rows(f"sqlite:///{service.database}", document["id"]) == [("skellam", 0, "completed")]
    assert _database_rows(f"sqlite:///{service.database}", child_document["id"]) == [
        ("skellam", index, "completed") for index in range(1, 5)
    ]
