"""``gdpfed train --plan-id ID --report-to URL`` for silo and metric plans against a real
``gdpfed serve`` (issue 29): every round claimed and completed, a metric run's rounds with
their participants, and at the end the service's ledger equal to the run's ``summary.json``
(docs/ledger.md §6-§8). A re-plan is not followed by these runs yet: the superseded answer
stops the run (exit 3) naming the re-plan.
"""

from __future__ import annotations

import json
import re
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
    database_url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'gdpfed.db'}"
    with serve(database_url) as running:
        token = re.search(r"^\s+(gdpfed_\S+)$", "".join(running.stderr), re.MULTILINE).group(1)  # type: ignore[union-attr]
        running.token = token  # type: ignore[attr-defined]
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


def test_a_silo_run_stops_at_a_replan_naming_it(server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """An operator's budget change after round 0: the claim of round 1 is answered
    ``superseded``; the silo run does not follow re-plans yet, so it stops (exit 3) before
    running round 1, naming the re-plan, and the parent's ledger holds round 0 only."""
    from trainer.run.reporting import RoundReporter

    api = _api(server)
    plan = _plan(api, SILO_SCENARIO)
    child: dict[str, Any] = {}
    claim = RoundReporter.claim

    def replanned_before_round_1(self: RoundReporter, round_index: int) -> Any:
        if round_index == 1 and not child:
            response = api.post(f"/v1/plans/{plan['id']}/replan",
                                json={"changes": {"silos": [{"id": "s1", "epsilon": 5.0}]}})
            assert response.status_code == 201, response.text
            child.update(response.json())
        return claim(self, round_index)

    monkeypatch.setattr(RoundReporter, "claim", replanned_before_round_1)
    code = _train(server, plan["id"], SILO_CLI, tmp_path / "run")
    err = capsys.readouterr().err
    assert code == 3, err
    line = err.strip().splitlines()[-1]
    assert f"re-planned as {child['id']} from round 1" in line and f"--plan-id {child['id']}" in line, err
    assert "Traceback" not in err
    parent = api.get(f"/v1/plans/{plan['id']}/ledger").json()
    assert parent["rounds_counted"] == parent["rounds_reported"] == 1 and parent["superseded_by"] == child["id"]
    assert [json.loads(row)["round"] for row in (tmp_path / "run" / "rounds.jsonl").read_text().splitlines()] == [0]


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

    def lossy(self: ServiceLink, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        if body is not None and body.get("round_index") == 2 and body.get("status") == "completed" and not failed:
            failed.append(body)
            return "ConnectError: the test's network"
        return request(self, method, path, body)

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
