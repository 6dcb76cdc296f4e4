"""``gdpfed train --plan-id ID --report-to URL`` for silo and metric plans against a real
``gdpfed serve`` (issue 29): every round claimed and completed, a metric run's rounds with
their participants, and at the end the service's ledger equal to the run's ``summary.json``
(docs/ledger.md §6-§8). A budget change mid-run (a silo's epsilon raised and another's
lowered; a metric group's leakage budget raised or lowered, which moves its participation
cap) is followed from the re-plan's first round, as a client-level run follows one; one
below what was spent is refused. Refused reports (a key revoked mid-run, the preflight's
refusals) stop the run with nothing lost.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest

from app import cli as app_cli
from tests.app.test_e2e import serve

pytest.importorskip("torch")

SILO_SCENARIO = {
    "privacy_unit": "silo_sample",
    "silos": [{"id": "s0", "num_samples": 30, "epsilon": 2.0}, {"id": "s1", "num_samples": 30, "epsilon": 4.0},
              {"id": "s2", "num_samples": 30, "epsilon": 2.0}],
    "delta": 1e-5, "rounds": 3, "batch_size": 10, "clip_norm": 1.0,
}
SILO_CLI = ["--dataset", "mean_estimation", "--model", "mean", "--lr", "0.1"]
# 100 clients, 7 a round over 6 rounds; the budget caps each client at 2 releases, which the
# trainer's ledger enforces when it selects and the service checks from the participants
METRIC_SCENARIO = {
    "privacy_unit": "metric_local",
    "groups": [{"id": "all", "num_clients": 100, "noise_multiplier": 5.0, "leakage_budget": 0.8}],
    "rounds": 6, "model_dim": 2, "clients_per_round": 7, "hypotheses": 2, "radius_rule": "public", "radius": 0.05,
}
METRIC_CLI = ["--dataset", "metric_synthetic", "--partition", "natural", "--model", "mlp", "--model-option",
              "hidden=[]", "--model-option", "bias=false", "--local-steps", "1", "--batch-size", "10", "--lr", "0.1",
              "--strategy", "metric_ifca"]


@pytest.fixture(autouse=True)
def only_train(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app_cli, "SUBCOMMAND_MODULES", {"train": "trainer.cli"})
    monkeypatch.delenv("GDPFED_API_KEY", raising=False)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    database = tmp_path_factory.mktemp("db") / "gdpfed.db"
    with serve(f"sqlite:///{database}") as running:
        token = re.search(r"^\s+(gdpfed_\S+)$", "".join(running.stderr), re.MULTILINE).group(1)  # type: ignore[union-attr]
        running.token = token  # type: ignore[attr-defined]
        running.database = database  # type: ignore[attr-defined]
        yield running


def _api(server: Any) -> httpx.Client:
    return httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {server.token}"}, timeout=60)


def _plan(api: httpx.Client, scenario: dict[str, Any]) -> dict[str, Any]:
    created = api.post("/v1/plans", json={"scenario": scenario})
    assert created.status_code == 201, created.text
    return dict(created.json())


def _train(server: Any, plan_id: str, cli: list[str], out: Path) -> int:
    return app_cli.run(["train", "--plan-id", plan_id, "--report-to", server.base_url, "--api-key", server.token,
                        *cli, "--out", str(out), "--json"])


def _rounds(api: httpx.Client, plan_id: str) -> list[dict[str, Any]]:
    response = api.get(f"/v1/plans/{plan_id}/rounds")
    assert response.status_code == 200, response.text
    body = response.json()
    return list(body["items"] if isinstance(body, dict) else body)


def test_a_silo_run_reports_every_round_and_the_ledgers_agree(server: Any, tmp_path: Path) -> None:
    api = _api(server)
    plan = _plan(api, SILO_SCENARIO)
    out = tmp_path / "run"
    assert _train(server, plan["id"], SILO_CLI, out) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] and summary["reports_pending"] == 0 and summary["plan_id"] == plan["id"]
    ledger = api.get(f"/v1/plans/{plan['id']}/ledger").json()
    assert ledger["privacy_unit"] == "silo_sample" and ledger["label"] == "silo sample-level"
    assert ledger["rounds_counted"] == ledger["rounds_reported"] == 3
    spent = {silo["id"]: silo["epsilon_spent"] for silo in ledger["silos"]}
    assert set(spent) == {"s0", "s1", "s2"} and all(value > 0 for value in spent.values())
    assert spent == pytest.approx(summary["epsilon_spent"], rel=1e-9)


def test_a_metric_run_reports_its_participants_and_the_ledgers_agree(server: Any, tmp_path: Path) -> None:
    api = _api(server)
    plan = _plan(api, METRIC_SCENARIO)
    out = tmp_path / "run"
    assert _train(server, plan["id"], METRIC_CLI, out) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] and summary["reports_pending"] == 0
    ledger = api.get(f"/v1/plans/{plan['id']}/ledger").json()
    assert ledger["privacy_unit"] == "metric_local" and ledger["rounds_counted"] == ledger["rounds_reported"] == 6
    # every round's participants arrived: no round is counted as a release of every client
    assert ledger["rounds_without_participants"] == 0
    (group,) = ledger["groups"]
    leak = summary["final_metrics"]
    assert group["leakage_spent"] == pytest.approx(leak["metric_leakage_max"], rel=1e-12)
    assert group["leakage_median"] == pytest.approx(leak["metric_leakage_median"], rel=1e-12)
    assert group["participations_max"] == leak["metric_participations_max"]


def _replan_before_round(monkeypatch: pytest.MonkeyPatch, round_index: int, change: Any) -> dict[str, Any]:
    """Run ``change()`` (the operator's budget change; it returns the child plan) just before
    the run claims ``round_index``; the child's document lands in the returned dict."""
    from trainer.run.reporting import RoundReporter

    child: dict[str, Any] = {}
    claim = RoundReporter.claim

    def replanned_first(self: RoundReporter, index: int) -> Any:
        if index == round_index and not child:
            child.update(change())
        return claim(self, index)

    monkeypatch.setattr(RoundReporter, "claim", replanned_first)
    return child


def _rounds_once(server: Any, chain: list[str], rounds: int, out: Path) -> None:
    """Each of the run's rounds is once in ``rounds.jsonl`` and once in the service's DB,
    completed, on the plan of ``chain`` that covers it (the parent up to its child's start)."""
    logged = [json.loads(line)["round"] for line in (out / "rounds.jsonl").read_text().splitlines() if line.strip()]
    assert logged == list(range(rounds))
    with sqlite3.connect(server.database) as db:
        rows = db.execute(
            f"SELECT plan_id, round_index, status FROM ledger_rounds WHERE plan_id IN ({','.join('?' * len(chain))}) "
            "ORDER BY round_index", chain
        ).fetchall()
    assert [row[1] for row in rows] == list(range(rounds)) and {row[2] for row in rows} == {"completed"}
    api = _api(server)
    starts = [api.get(f"/v1/plans/{plan_id}/ledger").json()["start_round"] for plan_id in chain]
    for plan_id, index, _ in rows:
        owner = max(i for i, start in enumerate(starts) if start <= index)
        assert plan_id == chain[owner], (plan_id, index, starts)


def test_a_silo_run_follows_a_budget_change_and_the_ledgers_agree(server: Any, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Before round 1 the operator lowers s0 below what it spent (refused, 409 naming the
    field), then lowers s0 (2 -> 1.8) and raises s1 (4 -> 5): the claim of round 1 is
    answered ``superseded`` and the run continues on the re-plan from round 1 (it stopped
    there, exit 3, before). The re-plan's ledger equals summary.json silo by silo; the raised
    silo spends past its old budget and within the new one, the lowered within its new one."""
    api = _api(server)
    plan = _plan(api, {**SILO_SCENARIO, "rounds": 4})
    refused: dict[str, Any] = {}

    def change() -> Any:
        spent = api.get(f"/v1/plans/{plan['id']}/ledger").json()["silos"][0]["epsilon_spent"]
        below = api.post(f"/v1/plans/{plan['id']}/replan",
                         json={"changes": {"silos": [{"id": "s0", "epsilon": spent / 2}]}})
        refused.update(status=below.status_code, body=below.json())
        response = api.post(f"/v1/plans/{plan['id']}/replan",
                            json={"changes": {"silos": [{"id": "s0", "epsilon": 1.8}, {"id": "s1", "epsilon": 5.0}]}})
        assert response.status_code == 201, response.text
        return response.json()

    child = _replan_before_round(monkeypatch, 1, change)
    out = tmp_path / "run"
    code = _train(server, plan["id"], SILO_CLI, out)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert refused["status"] == 409 and refused["body"]["code"] == "budget_conflict"
    assert refused["body"]["field"] == "changes.silos.0.epsilon"
    assert f"re-planned as {child['id']} from round 1; continuing on it" in captured.err
    summary = json.loads(captured.out)
    assert summary["complete"] and summary["rounds_run"] == 4 and summary["reports_pending"] == 0
    assert summary["plan_id"] == child["id"] and summary["superseded_plans"] == [plan["id"]]
    assert summary["epsilon_target"] == {"s0": 1.8, "s1": 5.0, "s2": 2.0}
    assert summary["notion"].startswith("silo-specific sample-level")

    ledger = api.get(f"/v1/plans/{child['id']}/ledger").json()
    assert ledger["label"] == "silo sample-level" and ledger["start_round"] == 1
    assert ledger["rounds_counted"] == ledger["rounds_reported"] == 3
    spent = {silo["id"]: silo["epsilon_spent"] for silo in ledger["silos"]}
    assert spent == pytest.approx(summary["epsilon_spent"], rel=1e-12)
    assert 4.0 < spent["s1"] <= 5.0 * (1 + 1e-9) and spent["s0"] <= 1.8 * (1 + 1e-9)
    parent = api.get(f"/v1/plans/{plan['id']}/ledger").json()
    assert parent["rounds_counted"] == parent["rounds_reported"] == 1 and parent["superseded_by"] == child["id"]
    _rounds_once(server, [plan["id"], child["id"]], 4, out)


# 10 clients, 5 a round over 6 rounds; n / nu = 0.4 a release, so the budget 0.8 caps each
# client at 2 releases: 20 of the 30 places the rounds would fill
CAPPED_SCENARIO = {**METRIC_SCENARIO, "groups": [{"id": "all", "num_clients": 10, "noise_multiplier": 5.0,
                                                  "leakage_budget": 0.8}], "clients_per_round": 5}


@pytest.mark.parametrize(("scenario", "budget", "cap"), [(CAPPED_SCENARIO, 1.2, 3), (METRIC_SCENARIO, 0.4, 1)],
                         ids=["raised", "lowered"])
def test_a_metric_run_follows_a_leakage_budget_change_and_its_cap_moves(
        server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        scenario: dict[str, Any], budget: float, cap: int) -> None:
    """Before round 1 (7 or 5 clients have released once, leakage 0.4) a budget below that
    is refused (409 naming the field); the change to ``budget`` moves the cap from 2 to
    ``cap`` and the run enforces it from round 1 on: raised, the 10 clients release 3 times
    (their 30 places need it; at cap 2 the run could fill 20); lowered, none of the 100
    releases twice. The re-plan's leakage ledger equals the run's, and no round is counted
    without its participants."""
    api = _api(server)
    plan = _plan(api, scenario)
    refused: dict[str, Any] = {}

    def change() -> Any:
        below = api.post(f"/v1/plans/{plan['id']}/replan",
                         json={"changes": {"groups": [{"id": "all", "leakage_budget": 0.3}]}})
        refused.update(status=below.status_code, body=below.json())
        response = api.post(f"/v1/plans/{plan['id']}/replan",
                            json={"changes": {"groups": [{"id": "all", "leakage_budget": budget}]}})
        assert response.status_code == 201, response.text
        return response.json()

    child = _replan_before_round(monkeypatch, 1, change)
    out = tmp_path / "run"
    code = _train(server, plan["id"], METRIC_CLI, out)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert refused["status"] == 409 and refused["body"]["field"] == "changes.groups.0.leakage_budget"
    assert child["groups"][0]["max_participations"] == cap
    summary = json.loads(captured.out)
    assert summary["complete"] and summary["rounds_run"] == 6 and summary["reports_pending"] == 0
    assert summary["plan_id"] == child["id"] and summary["superseded_plans"] == [plan["id"]]
    assert summary["epsilon_spent"] == {} and summary["privacy_unit"] == "metric_local"
    leak = summary["final_metrics"]
    assert leak["metric_participations_max"] == cap
    assert leak["metric_leakage_max"] == pytest.approx(0.4 * cap, rel=1e-12)

    ledger = api.get(f"/v1/plans/{child['id']}/ledger").json()
    assert ledger["label"] == "leakage (metric d-privacy)" and ledger["start_round"] == 1
    assert ledger["rounds_counted"] == ledger["rounds_reported"] == 5 and ledger["rounds_without_participants"] == 0
    (group,) = ledger["groups"]
    assert group["max_participations"] == cap and group["participations_max"] == cap
    assert group["leakage_spent"] == pytest.approx(leak["metric_leakage_max"], rel=1e-12)
    assert group["leakage_median"] == pytest.approx(leak["metric_leakage_median"], rel=1e-12)
    assert group["leakage_spent"] <= budget * (1 + 1e-12)
    _rounds_once(server, [plan["id"], child["id"]], 6, out)


def test_a_metric_completion_that_failed_is_delivered_later_with_its_participants(
        server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Round 2's completion cannot be delivered (the network); it is queued with its
    participants and delivered after round 3, and the ledger still equals the run's: a
    queued report keeps who released."""
    from trainer.run.reporting import ServiceLink

    api = _api(server)
    plan = _plan(api, METRIC_SCENARIO)
    request = ServiceLink.request
    failed: list[dict[str, Any]] = []

    def lossy(
        self: ServiceLink, method: str, path: str, body: dict[str, Any] | None = None, *, quiet: bool = False
    ) -> Any:
        if body is not None and body.get("round_index") == 2 and body.get("status") == "completed" and not failed:
            failed.append(body)
            return "ConnectError: the test's network"
        return request(self, method, path, body, quiet=quiet)

    monkeypatch.setattr(ServiceLink, "request", lossy)
    out = tmp_path / "run"
    assert _train(server, plan["id"], METRIC_CLI, out) == 0
    assert failed and set(failed[0]["participants"]) == {"all"} and len(failed[0]["participants"]["all"]) == 7
    summary = json.loads((out / "summary.json").read_text())
    ledger = api.get(f"/v1/plans/{plan['id']}/ledger").json()
    assert ledger["rounds_reported"] == 6 and ledger["rounds_without_participants"] == 0
    (group,) = ledger["groups"]
    assert group["leakage_spent"] == pytest.approx(summary["final_metrics"]["metric_leakage_max"], rel=1e-12)
    assert group["leakage_median"] == pytest.approx(summary["final_metrics"]["metric_leakage_median"], rel=1e-12)


def test_a_metric_run_whose_last_report_is_undelivered_says_so_and_the_resume_delivers_it(
        server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The last round's completion cannot be delivered (the network): the run exits 3 telling
    to resume, and summary.json counts the report pending. The metric summary said 0 and
    the job exited 0, so nothing told the operator the service's ledger lacked the round's
    participants (it counted the round as a release of every client). The resume delivers it."""
    from trainer.run.reporting import ServiceLink

    api = _api(server)
    plan = _plan(api, {**METRIC_SCENARIO, "rounds": 3})
    request = ServiceLink.request

    def last_completion_lost(
        self: ServiceLink, method: str, path: str, body: dict[str, Any] | None = None, *, quiet: bool = False
    ) -> Any:
        if body is not None and body.get("round_index") == 2 and body.get("status") == "completed":
            return "ConnectError: the test's network"
        return request(self, method, path, body, quiet=quiet)

    monkeypatch.setattr(ServiceLink, "request", last_completion_lost)
    out = tmp_path / "run"
    code = _train(server, plan["id"], METRIC_CLI, out)
    captured = capsys.readouterr()
    assert code == 3, captured.err
    assert "1 round report(s) were not delivered; rerun with" in captured.err
    assert json.loads((out / "summary.json").read_text())["reports_pending"] == 1
    assert api.get(f"/v1/plans/{plan['id']}/ledger").json()["rounds_without_participants"] == 1

    monkeypatch.setattr(ServiceLink, "request", request)
    monkeypatch.setenv("GDPFED_API_KEY", server.token)
    code = app_cli.run(["train", "--out", str(out), "--resume", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    assert summary["reports_pending"] == 0 and summary["plan_id"] == plan["id"]
    ledger = api.get(f"/v1/plans/{plan['id']}/ledger").json()
    assert ledger["rounds_without_participants"] == 0
    (group,) = ledger["groups"]
    assert group["leakage_spent"] == pytest.approx(summary["final_metrics"]["metric_leakage_max"], rel=1e-12)
    _rounds_once(server, [plan["id"]], 3, out)


UNIT_JOBS = {"silo": (SILO_SCENARIO, SILO_CLI), "metric": (METRIC_SCENARIO, METRIC_CLI)}


@pytest.mark.parametrize("unit", sorted(UNIT_JOBS))
def test_a_key_revoked_mid_run_stops_the_job_and_a_resume_with_a_new_key_delivers_what_was_refused(
        server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        unit: str) -> None:
    """The operator revokes the job's key after the claim of round 1 was acknowledged: the
    round's completion is refused (401), the job stops after its checkpoint (exit 3, one
    line) with the completion (a metric run's with its participants) kept. ``--resume``
    with a new key delivers it first and finishes; the service's ledger equals summary.json
    and each round is once in rounds.jsonl and once, completed, in the service's DB."""
    from trainer.run.reporting import RoundReporter

    scenario, cli = UNIT_JOBS[unit]
    api = _api(server)
    plan = _plan(api, {**scenario, "rounds": 3})
    created = api.post("/v1/keys", json={"name": f"ci-{unit}", "role": "operator"})
    assert created.status_code == 201, created.text
    claim = RoundReporter.claim

    def revoked_after_claiming_round_1(self: RoundReporter, index: int) -> Any:
        answer = claim(self, index)
        if index == 1:
            assert api.delete(f"/v1/keys/ci-{unit}").status_code == 200
        return answer

    monkeypatch.setattr(RoundReporter, "claim", revoked_after_claiming_round_1)
    out = tmp_path / "run"
    code = app_cli.run(["train", "--plan-id", plan["id"], "--report-to", server.base_url, "--api-key",
                        created.json()["token"], *cli, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 3, err
    assert "refused the report of round 1" in err and "HTTP 401" in err and "Traceback" not in err
    ledger = api.get(f"/v1/plans/{plan['id']}/ledger").json()
    assert ledger["rounds_counted"] == 2  # round 1 was claimed: it counts, though its completion was refused

    monkeypatch.setattr(RoundReporter, "claim", claim)
    second = api.post("/v1/keys", json={"name": f"ci-{unit}-2", "role": "operator"}).json()["token"]
    monkeypatch.setenv("GDPFED_API_KEY", second)
    code = app_cli.run(["train", "--out", str(out), "--resume", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    assert summary["complete"] and summary["reports_pending"] == 0 and summary["plan_id"] == plan["id"]
    ledger = api.get(f"/v1/plans/{plan['id']}/ledger").json()
    assert ledger["rounds_counted"] == ledger["rounds_reported"] == 3
    if unit == "silo":
        assert {s["id"]: s["epsilon_spent"] for s in ledger["silos"]} == pytest.approx(summary["epsilon_spent"],
                                                                                        rel=1e-12)
    else:
        (group,) = ledger["groups"]
        assert ledger["rounds_without_participants"] == 0
        assert group["leakage_spent"] == pytest.approx(summary["final_metrics"]["metric_leakage_max"], rel=1e-12)
        assert group["leakage_median"] == pytest.approx(summary["final_metrics"]["metric_leakage_median"], rel=1e-12)
    _rounds_once(server, [plan["id"]], 3, out)


@pytest.mark.parametrize("case", ["wrong_key", "planner_key", "re_planned", "trained"])
@pytest.mark.parametrize("unit", sorted(UNIT_JOBS))
def test_a_silo_or_metric_job_is_refused_before_round_0(server: Any, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str], unit: str,
                                                        case: str) -> None:
    """The client-level preflight's refusals for silo and metric plans: a key the service
    does not accept, a key without the operator role, a plan that was re-planned (train the
    re-plan), a plan another job trained (its budget would be spent twice): exit 2, one
    line naming the field, nothing written."""
    scenario, cli = UNIT_JOBS[unit]
    api = _api(server)
    plan = _plan(api, scenario)
    key, needles = server.token, []
    if case == "wrong_key":
        key, needles = "gdpfed_not-a-key", ["api-key", "does not accept"]
    elif case == "planner_key":
        created = api.post("/v1/keys", json={"name": f"planner-{unit}", "role": "planner"})
        assert created.status_code == 201, created.text
        key, needles = created.json()["token"], ["api-key", "operator role"]
    elif case == "re_planned":
        child = api.post(f"/v1/plans/{plan['id']}/replan", json={})
        assert child.status_code == 201, child.text
        needles = ["plan-id", f"re-planned as {child.json()['id']}"]
    elif case == "trained":
        claimed = api.post(f"/v1/plans/{plan['id']}/rounds", json={"round_index": 0, "status": "started"})
        assert claimed.status_code in (200, 201), claimed.text
        needles = ["plan-id", "already counts 1 round(s)"]
    out = tmp_path / "never"
    code = app_cli.run(["train", "--plan-id", plan["id"], "--report-to", server.base_url, "--api-key", key, *cli,
                        "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    assert not out.exists()
