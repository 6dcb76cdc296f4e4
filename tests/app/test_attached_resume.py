"""``kill -9`` an attached ``gdpfed train`` against a real ``gdpfed serve`` and ``--resume`` it.

Issue 25 §1: a CI job that followed an operator's budget change could not be resumed (exit
3, "cannot follow the re-plan ...: it starts at round 10, this run is at round 40"). Here
the trainer is a real process killed with SIGKILL at exact points of its rounds
(``tests/app/killed_trainer.py``): before the re-plan's first round, right after it, after
a second re-plan, between a round's acknowledged report and its checkpoint, and while the
service itself is down. Each run is resumed with ``gdpfed train --out RUN --resume``, and
the end state is checked: the service's ledger equals ``summary.json`` group by group,
every round is counted once, completed, on the plan that covers it, and ``rounds.jsonl``
holds every round once.

Issue 29 repeats the short and the long version for a silo and a metric run, whose budget
changes are re-plans of their plans (``POST /v1/plans/ID/replan``): the service's ledger
then equals summary.json silo by silo, or in the metric group's leakage and releases.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.test_attached_trainer import TINY
from tests.app.test_attached_units import CAPPED_SCENARIO, METRIC_CLI, SILO_CLI, SILO_SCENARIO
from tests.app.test_e2e import REPO, Server, start_server, stop_server
from tests.trainer.test_reporting import SCENARIO as ATTACHED_SCENARIO

pytest.importorskip("torch")

KILLED = -signal.SIGKILL


@dataclass
class Service:
    """A ``gdpfed serve`` on a fixed port and database, which a test may crash and restart."""

    database: Path
    server: Server
    token: str

    @property
    def url(self) -> str:
        return self.server.base_url

    def api(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=60)

    def restart(self) -> None:
        """Start the service again on the same port and database (after it was killed)."""
        self.server.process.wait(timeout=30)
        port = int(self.url.rsplit(":", 1)[1])
        self.server = start_server(f"sqlite:///{self.database}", port=port)
        self.server.wait_ready()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    database = tmp_path / "gdpfed.db"
    server = start_server(f"sqlite:///{database}")
    running = Service(database, server, "")
    try:
        server.wait_ready()
        running.token = re.search(r"^\s+(gdpfed_\S+)$", "".join(server.stderr), re.MULTILINE).group(1)  # type: ignore[union-attr]
        yield running
    finally:
        stop_server(running.server)


def population_plan(service: Service, rounds: int) -> dict[str, Any]:
    with service.api() as api:
        population = api.post("/v1/populations", json={"name": "ci", "scenario": {**ATTACHED_SCENARIO, "rounds": rounds}})
        assert population.status_code == 201, population.text
        plan = api.post(f"/v1/populations/{population.json()['id']}/plans")
        assert plan.status_code == 201, plan.text
        return dict(plan.json())


def train(service: Service, hooks: dict[str, list[Any]], *args: str) -> subprocess.CompletedProcess[str]:
    """``gdpfed train ARGS`` as its own process, with ``hooks`` (``killed_trainer``'s points)."""
    env = {
        **os.environ, "PYTHONPATH": str(REPO), "GDPFED_API_KEY": service.token, "GDPFED_TEST_URL": service.url,
        "GDPFED_TEST_SERVER_PID": str(service.server.process.pid), "GDPFED_TEST_HOOKS": json.dumps(hooks),
    }
    return subprocess.run([sys.executable, "-m", "tests.app.killed_trainer", "train", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)


def raise_budget(plan: dict[str, Any], epsilon: float) -> dict[str, Any]:
    """The operator's budget change of group strict (``killed_trainer``'s patch action)."""
    return {"patch": f"/v1/populations/{plan['population_id']}/groups/strict", "epsilon": epsilon}


def resume(service: Service, out: Path, hooks: dict[str, list[Any]] | None = None) -> subprocess.CompletedProcess[str]:
    return train(service, hooks or {}, "--out", str(out), "--resume")


def logged_rounds(out: Path) -> list[int]:
    return [json.loads(line)["round"] for line in (out / "rounds.jsonl").read_text().splitlines() if line.strip()]


def figures(ledger: dict[str, Any], summary: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    """The service's ledger and the run's summary.json, each as its unit's figures per
    protected entity: a client group's or a silo's epsilon, a metric group's worst-case and
    median leakage and most releases (the metric summary's figures are over all its groups:
    the plans here have one)."""
    unit = ledger.get("privacy_unit", "client")
    if unit == "metric_local":
        assert ledger["rounds_without_participants"] == 0, ledger
        (group,) = ledger["groups"]
        final = summary["final_metrics"]
        return ({"leakage": group["leakage_spent"], "median": group["leakage_median"],
                 "releases": group["participations_max"]},
                {"leakage": final["metric_leakage_max"], "median": final["metric_leakage_median"],
                 "releases": final["metric_participations_max"]})
    entities = ledger["silos"] if unit == "silo_sample" else ledger["groups"]
    return {e["id"]: e["epsilon_spent"] for e in entities}, summary["epsilon_spent"]


def assert_ledgers_agree(service: Service, out: Path, rounds: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The finished run's summary against the service: the chain of plans it followed covers
    rounds 0..rounds-1 back to back, each round counted once and completed on the plan that
    covers it, the last plan's ledger equals the summary per group or silo (``figures``);
    the log holds each round once."""
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] and summary["rounds_run"] == rounds and summary["reports_pending"] == 0, summary
    chain = [*summary["superseded_plans"], summary["plan_id"]]
    with service.api() as api:
        ledgers = [api.get(f"/v1/plans/{plan_id}/ledger").json() for plan_id in chain]
    start = 0
    for ledger in ledgers:
        assert ledger["start_round"] == start, ledgers
        assert ledger["rounds_reported"] == ledger["rounds_counted"], ledger
        start += ledger["rounds_counted"]
    assert start == rounds and ledgers[-1]["superseded_by"] is None
    service_figures, run_figures = figures(ledgers[-1], summary)
    assert service_figures == pytest.approx(run_figures, rel=1e-12)

    with sqlite3.connect(service.database) as db:
        rows = db.execute(
            f"SELECT plan_id, round_index, status FROM ledger_rounds WHERE plan_id IN ({','.join('?' * len(chain))}) "
            "ORDER BY round_index", chain
        ).fetchall()
    assert [row[1] for row in rows] == list(range(rounds))
    assert {row[2] for row in rows} == {"completed"}
    owner = {index: ledger["plan_id"] for ledger in ledgers
             for index in range(ledger["start_round"], ledger["start_round"] + ledger["rounds_counted"])}
    assert all(owner[index] == plan_id for plan_id, index, _ in rows)
    assert logged_rounds(out) == list(range(rounds))
    return summary, ledgers


def test_killed_after_following_a_replan_resumes_on_it(service: Service, tmp_path: Path) -> None:
    """The short version: strict 2 -> 3 after round 0 (the re-plan starts at round 1); the job
    follows it and is killed after round 2's report was acknowledged, before its checkpoint
    (the checkpoint on disk: next round 2, on the re-plan). The resume re-runs round 2
    (its claim and report are no-ops at the service) and finishes; before the fix it exited
    3: "cannot follow the re-plan ...: it starts at round 1, this run is at round 2"."""
    plan = population_plan(service, 5)
    out = tmp_path / "run"
    killed = train(service, {"checkpointed:1": [raise_budget(plan, 3.0)], "checkpoint:3": ["kill"]},
                   "--plan-id", plan["id"], "--report-to", service.url, *TINY, "--out", str(out))
    assert killed.returncode == KILLED, killed.stderr
    assert "re-planned as" in killed.stderr
    assert logged_rounds(out) == [0, 1, 2]
    with service.api() as api:
        first = api.get(f"/v1/plans/{plan['id']}/ledger").json()
        replan = api.get(f"/v1/plans/{first['superseded_by']}/ledger").json()
    assert first["rounds_counted"] == 1 and replan["start_round"] == 1 and replan["rounds_counted"] == 2

    resumed = resume(service, out)
    assert resumed.returncode == 0, resumed.stderr
    summary, ledgers = assert_ledgers_agree(service, out, 5)
    assert [ledger["plan_id"] for ledger in ledgers] == [plan["id"], replan["plan_id"]]
    assert summary["epsilon_target"]["strict"] == 3.0


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("GDPFED_FULL"), reason="long real-process run: set GDPFED_FULL=1")
def test_killed_at_every_point_of_two_replans_and_a_service_crash_resumes_each_time(
    service: Service, tmp_path: Path
) -> None:
    """Four kill -9s and a crash of the service over one 12-round job:

    1. strict 2 -> 3 after round 1 (re-plan B from round 2); killed before claiming round 2;
    2. resumed: follows B at round 2, killed right after round 2's checkpoint (on B);
    3. resumed on B; strict 3 -> 4 after round 4 (C from round 5); follows C; killed after
       round 6's report was acknowledged, before its checkpoint;
    4. resumed on C (round 6 again); the service crashes right after acknowledging the
       claim of round 8; round 8's report is queued; killed after round 8's checkpoint;
    5. resumed while the service is down: exit 2, one line, nothing changed;
    6. the service restarts on its database; resumed: delivers round 8's report, finishes.
    """
    rounds = 12
    plan = population_plan(service, rounds)
    out = tmp_path / "run"

    killed = train(service, {"checkpointed:2": [raise_budget(plan, 3.0), "kill"]},
                   "--plan-id", plan["id"], "--report-to", service.url, *TINY, "--rounds", str(rounds),
                   "--out", str(out))
    assert killed.returncode == KILLED, killed.stderr
    assert logged_rounds(out) == [0, 1]

    killed = resume(service, out, {"checkpointed:3": ["kill"]})
    assert killed.returncode == KILLED, killed.stderr
    assert "re-planned as" in killed.stderr and logged_rounds(out) == [0, 1, 2]

    killed = resume(service, out, {"checkpointed:5": [raise_budget(plan, 4.0)], "checkpoint:7": ["kill"]})
    assert killed.returncode == KILLED, killed.stderr
    assert "re-planned as" in killed.stderr and logged_rounds(out) == list(range(7))

    killed = resume(service, out, {"claimed:8": ["down"], "checkpointed:9": ["kill"]})
    assert killed.returncode == KILLED, killed.stderr
    assert "report of round 8 failed" in killed.stderr
    assert logged_rounds(out) == list(range(9))

    down = resume(service, out)
    assert down.returncode == 2, down.stderr
    assert "cannot reach" in down.stderr and len(down.stderr.strip().splitlines()) == 1
    assert logged_rounds(out) == list(range(9))

    service.restart()
    resumed = resume(service, out)
    assert resumed.returncode == 0, resumed.stderr
    summary, ledgers = assert_ledgers_agree(service, out, rounds)
    assert [ledger["start_round"] for ledger in ledgers] == [0, 2, 5]
    assert ledgers[0]["plan_id"] == plan["id"] and summary["epsilon_target"]["strict"] == 4.0


@dataclass(frozen=True)
class UnitRun:
    """A silo or metric plan's attached job: its scenario, its ``gdpfed train`` options, two
    budget changes (``POST /v1/plans/ID/replan``) and the budgets the run ends with."""

    scenario: dict[str, Any]
    cli: list[str]
    changes: tuple[dict[str, Any], dict[str, Any]]
    # after the first change, after both: each silo's epsilon, or the metric group's cap
    targets: tuple[dict[str, float], dict[str, float]]

    def plan(self, service: Service, rounds: int) -> dict[str, Any]:
        with service.api() as api:
            created = api.post("/v1/plans", json={"scenario": {**self.scenario, "rounds": rounds}})
            assert created.status_code == 201, created.text
            return dict(created.json())


UNIT_RUNS = {
    # s0 lowered and s1 raised, then s0 raised and s2 lowered
    "silo": UnitRun(
        SILO_SCENARIO, SILO_CLI,
        ({"silos": [{"id": "s0", "epsilon": 1.8}, {"id": "s1", "epsilon": 5.0}]},
         {"silos": [{"id": "s0", "epsilon": 2.5}, {"id": "s2", "epsilon": 1.9}]}),
        ({"s0": 1.8, "s1": 5.0, "s2": 2.0}, {"s0": 2.5, "s1": 5.0, "s2": 1.9}),
    ),
    # the leakage budget 0.8 -> 1.2 -> 2.0: the cap of 2 releases moves to 3, then 5
    "metric": UnitRun(
        CAPPED_SCENARIO, METRIC_CLI,
        ({"groups": [{"id": "all", "leakage_budget": 1.2}]}, {"groups": [{"id": "all", "leakage_budget": 2.0}]}),
        ({"all": 3}, {"all": 5}),
    ),
}


def replan(plan: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """The operator's budget change of ``plan``'s newest re-plan (``killed_trainer``'s replan action)."""
    return {"replan": plan["id"], "changes": changes}


def assert_budgets(service: Service, summary: dict[str, Any], expected: dict[str, float]) -> None:
    """The plan the run ended on holds ``expected``: each silo's epsilon (summary.json's
    targets), or the metric group's participation cap (its ledger), which the run kept to."""
    if summary["privacy_unit"] == "silo_sample":
        assert summary["epsilon_target"] == expected
        return
    with service.api() as api:
        (group,) = api.get(f"/v1/plans/{summary['plan_id']}/ledger").json()["groups"]
    assert {group["id"]: group["max_participations"]} == expected
    assert group["participations_max"] <= group["max_participations"]


@pytest.mark.parametrize("unit", sorted(UNIT_RUNS))
def test_a_silo_or_metric_run_killed_after_following_a_replan_resumes_on_it(
        service: Service, tmp_path: Path, unit: str) -> None:
    """The client's short version for a silo and a metric run (issue 29): the budget change
    after round 0 (the re-plan starts at round 1) is followed; the job is killed after round
    2's report was acknowledged, before its checkpoint; the resume re-runs round 2 on the
    re-plan and finishes with the service's ledger equal to summary.json."""
    run = UNIT_RUNS[unit]
    plan = run.plan(service, 5)
    out = tmp_path / "run"
    killed = train(service, {"checkpointed:1": [replan(plan, run.changes[0])], "checkpoint:3": ["kill"]},
                   "--plan-id", plan["id"], "--report-to", service.url, *run.cli, "--out", str(out))
    assert killed.returncode == KILLED, killed.stderr
    assert "re-planned as" in killed.stderr and "continuing on it" in killed.stderr
    assert logged_rounds(out) == [0, 1, 2]
    with service.api() as api:
        first = api.get(f"/v1/plans/{plan['id']}/ledger").json()
        child = api.get(f"/v1/plans/{first['superseded_by']}/ledger").json()
    assert first["rounds_counted"] == 1 and child["start_round"] == 1 and child["rounds_counted"] == 2

    resumed = resume(service, out)
    assert resumed.returncode == 0, resumed.stderr
    summary, ledgers = assert_ledgers_agree(service, out, 5)
    assert [ledger["plan_id"] for ledger in ledgers] == [plan["id"], child["plan_id"]]
    assert_budgets(service, summary, run.targets[0])


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("GDPFED_FULL"), reason="long real-process run: set GDPFED_FULL=1")
@pytest.mark.parametrize("unit", sorted(UNIT_RUNS))
def test_a_silo_or_metric_run_killed_at_every_point_of_two_replans_and_a_service_crash_resumes_each_time(
    service: Service, tmp_path: Path, unit: str
) -> None:
    """The client's long version for a silo and a metric run: four kill -9s and a crash of
    the service over one 12-round job, with two budget changes (``UNIT_RUNS``):

    1. the first change after round 1 (re-plan B from round 2); killed before claiming round 2;
    2. resumed: follows B at round 2, killed right after round 2's checkpoint (on B);
    3. resumed on B; the second change after round 4 (C from round 5); follows C; killed
       after round 6's report was acknowledged, before its checkpoint;
    4. resumed on C (round 6 again); the service crashes right after acknowledging the
       claim of round 8; round 8's report (a metric run's with its participants) is
       queued; killed after round 8's checkpoint;
    5. resumed while the service is down: exit 2, one line, nothing changed;
    6. the service restarts on its database; resumed: delivers round 8's report, finishes.
    """
    run = UNIT_RUNS[unit]
    rounds = 12
    plan = run.plan(service, rounds)
    out = tmp_path / "run"

    killed = train(service, {"checkpointed:2": [replan(plan, run.changes[0]), "kill"]},
                   "--plan-id", plan["id"], "--report-to", service.url, *run.cli, "--out", str(out))
    assert killed.returncode == KILLED, killed.stderr
    assert logged_rounds(out) == [0, 1]

    killed = resume(service, out, {"checkpointed:3": ["kill"]})
    assert killed.returncode == KILLED, killed.stderr
    assert "re-planned as" in killed.stderr and logged_rounds(out) == [0, 1, 2]

    killed = resume(service, out, {"checkpointed:5": [replan(plan, run.changes[1])], "checkpoint:7": ["kill"]})
    assert killed.returncode == KILLED, killed.stderr
    assert "re-planned as" in killed.stderr and logged_rounds(out) == list(range(7))

    killed = resume(service, out, {"claimed:8": ["down"], "checkpointed:9": ["kill"]})
    assert killed.returncode == KILLED, killed.stderr
    assert "report of round 8 failed" in killed.stderr
    assert logged_rounds(out) == list(range(9))

    down = resume(service, out)
    assert down.returncode == 2, down.stderr
    assert "cannot reach" in down.stderr and len(down.stderr.strip().splitlines()) == 1
    assert logged_rounds(out) == list(range(9))

    service.restart()
    resumed = resume(service, out)
    assert resumed.returncode == 0, resumed.stderr
    summary, ledgers = assert_ledgers_agree(service, out, rounds)
    assert [ledger["start_round"] for ledger in ledgers] == [0, 2, 5]
    assert ledgers[0]["plan_id"] == plan["id"]
    assert_budgets(service, summary, run.targets[1])
