"""``gdpfed train --plan-id ID --report-to URL`` against a real ``gdpfed serve`` process.

Issue 9 §2-§4 end to end: an operator raises a budget while a CI training job runs; the
job follows the re-plan, and at the end the service's ledger and the trainer's summary
agree group by group. Wrong keys, unreachable URLs, unknown or already-trained plans and a
plan file that is not the service's plan are refused before round 0 (exit 2, one line).
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from app import cli as app_cli
from tests.app.test_e2e import free_port, serve
from tests.trainer.test_reporting import SCENARIO as ATTACHED_SCENARIO

pytest.importorskip("torch")

SCENARIO = {**ATTACHED_SCENARIO, "rounds": 12}
TINY = ["--dataset", "digits", "--model", "mlp", "--model-option", "hidden=[8]", "--local-steps", "1"]


@pytest.fixture(autouse=True)
def only_train(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app_cli, "SUBCOMMAND_MODULES", {"train": "trainer.cli"})
    monkeypatch.delenv("GDPFED_API_KEY", raising=False)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    database_url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'gdpfed.db'}"
    with serve(database_url) as running:
        token = re.search(r"^\s+(gdpfed_\S+)$", "".join(running.stderr), re.MULTILINE).group(1)  # type: ignore[union-attr]
        running.token = token  # type: ignore[attr-defined]
        yield running


def _api(server: Any) -> httpx.Client:
    return httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {server.token}"}, timeout=60)


def _population_plan(api: httpx.Client, name: str) -> dict[str, Any]:
    population = api.post("/v1/populations", json={"name": name, "scenario": SCENARIO})
    assert population.status_code == 201, population.text
    plan = api.post(f"/v1/populations/{population.json()['id']}/plans")
    assert plan.status_code == 201, plan.text
    return dict(plan.json())


def test_ci_job_follows_a_budget_change_and_the_ledgers_agree(server: Any, tmp_path: Path, capsys: Any) -> None:
    api = _api(server)
    plan = _population_plan(api, "attached")
    changed: dict[str, Any] = {}

    def operator() -> None:
        # the operator raises strict's budget once the job is three rounds in
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if api.get(f"/v1/plans/{plan['id']}/ledger").json()["rounds_counted"] >= 3:
                response = api.patch(f"/v1/populations/{plan['population_id']}/groups/strict", json={"epsilon": 3.0})
                changed["response"] = response
                return
            time.sleep(0.02)

    thread = threading.Thread(target=operator)
    thread.start()
    key_file = tmp_path / "key"
    key_file.write_text(server.token + "\n")
    code = app_cli.run(["train", "--plan-id", plan["id"], "--report-to", server.base_url, "--api-key-file",
                        str(key_file), *TINY, "--out", str(tmp_path / "run"), "--json"])
    thread.join()
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert changed["response"].status_code == 200, changed["response"].text
    summary = json.loads(captured.out)
    child_id = changed["response"].json()["plan"]["id"]
    assert summary["complete"] and summary["rounds_run"] == 12 and summary["reports_pending"] == 0
    assert summary["plan_id"] == child_id and summary["superseded_plans"] == [plan["id"]]
    assert "re-planned as" in captured.err

    ledger = api.get(f"/v1/plans/{child_id}/ledger").json()
    start = ledger["start_round"]
    assert start >= 3 and ledger["rounds_counted"] == 12 - start and ledger["rounds_reported"] == 12 - start
    parent = api.get(f"/v1/plans/{plan['id']}/ledger").json()
    assert parent["rounds_counted"] == start and parent["rounds_reported"] == start
    service_spent = {g["id"]: g["epsilon_spent"] for g in ledger["groups"]}
    assert service_spent == pytest.approx(summary["epsilon_spent"], rel=1e-12)
    assert 2.0 < service_spent["strict"] <= 3.0 * (1 + 1e-9)
    assert server.token not in (tmp_path / "run" / "reporting.json").read_text()


def test_resume_without_report_to_keeps_reporting(server: Any, tmp_path: Path, capsys: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 9 §3: ``--out DIR --resume`` (the documented short form) keeps reporting."""
    import trainer.runner as runner

    api = _api(server)
    plan = _population_plan(api, "resumed")
    out = tmp_path / "run"
    monkeypatch.setenv("GDPFED_API_KEY", server.token)
    append = runner.append_round

    def interrupted(path: Path, record: Any) -> None:
        if record.round == 2:
            raise KeyboardInterrupt  # the CI job is cancelled during round 2
        append(path, record)

    monkeypatch.setattr(runner, "append_round", interrupted)
    code = app_cli.run(["train", "--plan-id", plan["id"], "--report-to", server.base_url, *TINY, "--rounds", "5",
                        "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 130, err
    ledger = api.get(f"/v1/plans/{plan['id']}/ledger").json()
    assert ledger["rounds_counted"] == 3  # round 2 was claimed: it counts although it never completed
    monkeypatch.setattr(runner, "append_round", append)

    # a second, fresh job on the same plan would spend its budget again: refused
    again = app_cli.run(["train", "--plan-id", plan["id"], "--report-to", server.base_url, *TINY,
                         "--out", str(tmp_path / "second")])
    err = capsys.readouterr().err
    assert again == 2 and "already counts 3 round(s)" in err and len(err.strip().splitlines()) == 1

    monkeypatch.delenv("GDPFED_API_KEY")
    code = app_cli.run(["train", "--out", str(out), "--resume"])
    err = capsys.readouterr().err
    assert code == 2 and "api-key" in err and server.base_url in err

    monkeypatch.setenv("GDPFED_API_KEY", server.token)
    code = app_cli.run(["train", "--out", str(out), "--resume", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    ledger = api.get(f"/v1/plans/{plan['id']}/ledger").json()
    assert ledger["rounds_counted"] == 5 and ledger["rounds_reported"] == 5
    assert {g["id"]: g["epsilon_spent"] for g in ledger["groups"]} == pytest.approx(summary["epsilon_spent"], rel=1e-12)


@pytest.mark.parametrize("case", ["wrong_key", "unreachable", "unknown_plan", "not_the_service_plan", "planner_key"])
def test_preflight_refuses_before_round_0(server: Any, tmp_path: Path, capsys: Any, case: str) -> None:
    api = _api(server)
    plan = _population_plan(api, f"preflight-{case}")
    url, key, plan_id, extra = server.base_url, server.token, plan["id"], []
    needles = []
    if case == "wrong_key":
        key, needles = "gdpfed_not-a-key", ["api-key", "does not accept"]
    elif case == "unreachable":
        url, needles = f"http://127.0.0.1:{free_port()}", ["report-to", "cannot reach"]
    elif case == "unknown_plan":
        plan_id, needles = "no-such-plan", ["plan-id", "no plan"]
    elif case == "not_the_service_plan":
        other = api.post("/v1/plans", json={"scenario": SCENARIO, "method": "dp_fedavg"}).json()
        path = tmp_path / "other.json"
        path.write_text(json.dumps(other))
        extra, needles = ["--plan", str(path)], ["plan", "not the service's plan"]
    elif case == "planner_key":
        created = api.post("/v1/keys", json={"name": f"planner-{case}", "role": "planner"})
        assert created.status_code == 201, created.text
        key, needles = created.json()["token"], ["api-key", "operator role"]
    out = tmp_path / "never"
    code = app_cli.run(["train", "--plan-id", plan_id, "--report-to", url, "--api-key", key, *extra, *TINY,
                        "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    assert not out.exists()
    assert key not in err or case == "wrong_key" and key not in err


def test_a_diverging_attached_run_stops_with_the_service_ledger_equal_to_the_trainers(
    server: Any, tmp_path: Path, capsys: Any
) -> None:
    """Issue 14: a run that diverges stops cleanly (exit 4); the rounds that ran are in both ledgers."""
    api = _api(server)
    plan = _population_plan(api, "diverging")
    # server step 1e20: round 0's parameters are huge but finite (not evaluated), round 1's test loss overflows
    code = app_cli.run(["train", "--plan-id", plan["id"], "--report-to", server.base_url, "--api-key", server.token,
                        *TINY, "--server-lr", "1e20", "--eval-every", "2", "--out", str(tmp_path / "run"), "--json"])
    captured = capsys.readouterr()
    assert code == 4, captured.err
    assert "Traceback" not in captured.err and "diverged at round 1" in captured.err
    summary = json.loads(captured.out)
    assert summary["diverged"]["round"] == 1 and summary["rounds_run"] == 2 and not summary["complete"]
    assert summary["reports_pending"] == 0
    ledger = api.get(f"/v1/plans/{plan['id']}/ledger").json()
    assert ledger["rounds_counted"] == 2 and ledger["rounds_reported"] == 2
    assert {g["id"]: g["epsilon_spent"] for g in ledger["groups"]} == pytest.approx(summary["epsilon_spent"], rel=1e-12)
