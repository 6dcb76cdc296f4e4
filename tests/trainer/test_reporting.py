"""``--report-to``: every completed round reaches the service's ledger; failures are retried
after the next round and never stop training; a repeated report is harmless."""

from __future__ import annotations

import json
import threading
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app import cli as app_cli
from planner.schema import load_plan
from trainer.run.reporting import RoundReporter
from trainer.run.runner import TrainConfig, execute_run, prepare_run
from tests.trainer.trainer_plans import hand_plan, quiet_progress

TOKEN = "op-test-token-0123456789abcdefghijklmnopqrstuvwxyz"


class FakeService(BaseHTTPRequestHandler):
    """Records posts; keyed by round_index like the real service; can fail on demand."""

    received: list[dict] = []
    stored: dict[int, dict] = {}
    fail_next = 0

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        cls = type(self)
        cls.received.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        if cls.fail_next > 0:
            cls.fail_next -= 1
            self.send_response(503)
            self.end_headers()
            return
        duplicate = body["round_index"] in cls.stored
        cls.stored.setdefault(body["round_index"], body)
        self.send_response(200 if duplicate else 201)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps({"duplicate": duplicate}).encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def service():
    handler = type("Handler", (FakeService,), {"received": [], "stored": {}, "fail_next": 0})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield handler, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_cli_reports_each_round_and_retries_a_failed_one(service, tmp_path, capsys, monkeypatch):
    handler, url = service
    monkeypatch.setattr(app_cli, "SUBCOMMAND_MODULES", {"train": "trainer.cli"})
    plan = hand_plan([("a", 2.0, 12, 0.5)], [("pa", ["a"], 0.8, 2, 1.0)], rounds=3, start_round=7, model_dim=500)
    document = plan.model_dump(mode="json")
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(document))
    # Round 7's report fails all three attempts; it is queued and delivered after round 8.
    handler.fail_next = 3
    monkeypatch.setattr("trainer.run.reporting.time.sleep", lambda seconds: None)
    code = app_cli.run([
        "train", "--plan", str(path), "--dataset", "digits", "--model", "mlp", "--model-option", "hidden=[8]",
        "--local-steps", "1", "--out", str(tmp_path / "run"), "--report-to", url + "/", "--api-key", "k3y",
        "--plan-id", "p42",
    ])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "report of round 7" in err and "queued" in err
    assert sorted(handler.stored) == [7, 8, 9]
    assert [r["body"]["round_index"] for r in handler.received] == [7, 7, 7, 7, 8, 9]
    for request in handler.received:
        assert request["path"] == "/v1/plans/p42/rounds"
        assert request["auth"] == "Bearer k3y"
        body = request["body"]
        assert set(body) == {"round_index", "aborted_pools", "metrics"}
        assert all(isinstance(v, float) for v in body["metrics"].values())
        assert {"sampled", "survived", "seconds", "loss", "accuracy", "epsilon.a"} <= set(body["metrics"])


def test_unreachable_service_never_stops_training(tmp_path):
    plan = hand_plan([("a", 2.0, 12, 0.5)], [("pa", ["a"], 0.8, 2, 1.0)], rounds=2, model_dim=500)
    logged = []
    reporter = RoundReporter("http://127.0.0.1:9", "k", "p", attempts=1, timeout_s=0.5, log=logged.append)
    config = TrainConfig(dataset="digits", model="mlp", model_options={"hidden": [8]}, rounds=2, local_steps=1)
    prepared = prepare_run(plan, plan.model_dump(mode="json"), config, tmp_path / "run")
    summary = execute_run(prepared, reporter=reporter, progress=quiet_progress(2))
    assert summary.complete and summary.reports_pending == 2
    assert logged
    # The queue is in the checkpoint, so a resumed run would deliver it.
    from trainer.run.checkpoint import load_checkpoint

    pending = load_checkpoint(tmp_path / "run" / "checkpoint.pt")["reporter"]["pending"]
    assert [item["round_index"] for item in pending] == [0, 1]



def test_real_service_ledger_matches_the_trainers_and_repeats_are_no_ops(tmp_path):
    from app.main import create_app
    from app.settings import Settings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    settings = Settings(database_url=f"sqlite:///{tmp_path / 'db.sqlite'}", initial_api_key=TOKEN)
    app = create_app(settings, announce_key=False)
    scenario = {
        "groups": [
            {"id": "strict", "epsilon": 2.0, "num_clients": 30},
            {"id": "loose", "epsilon": 8.0, "num_clients": 30},
        ],
        "delta": 1e-5,
        "rounds": 3,
        "clip_norm": 1.0,
        "model_dim": 1000,
        "expected_clients": 20,
        "keep_ratio": 1.0,
        "min_clients_per_pool": 2,
    }
    with TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        response = client.post("/v1/plans", json={"scenario": scenario, "method": "gdpfed_plus"})
        assert response.status_code == 201, response.text
        document = response.json()
        plan = load_plan(document)
        reporter = RoundReporter("http://testserver", TOKEN, document["id"], client=client)
        config = TrainConfig(dataset="digits", model="mlp", model_options={"hidden": [8]}, rounds=3, local_steps=1)
        prepared = prepare_run(plan, document, config, tmp_path / "run")
        summary = execute_run(
            prepared, reporter=reporter, plan_id=document["id"], progress=quiet_progress(3)
        )
        assert reporter.delivered == 3 and not reporter.pending
        ledger = client.get(f"/v1/plans/{document['id']}/ledger").json()
        assert ledger["rounds_reported"] == 3 and ledger["rounds_counted"] == 3
        service_spent = {g["id"]: g["epsilon_spent"] for g in ledger["groups"]}
        for group, spent in summary.epsilon_spent.items():
            assert service_spent[group] == pytest.approx(spent, rel=1e-9)
        # Re-posting a round (what a resumed run does after a crash) changes nothing.
        reporter.report(1, [], {"loss": 0.0})
        assert client.get(f"/v1/plans/{document['id']}/ledger").json() == ledger
