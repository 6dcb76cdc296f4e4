"""End to end against a real ``gdpfed serve`` (uvicorn) process on a loopback port.

Create a population, plan it, report rounds (one twice), raise a budget, get the
re-plan, check the ledger; stop the server, start it again on the same database and
check that everything is still there and no new key was printed.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.app.conftest import SMALL_SCENARIO

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    def __init__(self, process: subprocess.Popen[str], base_url: str) -> None:
        self.process = process
        self.base_url = base_url
        self.stderr: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line)

    def wait_ready(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("server exited:\n" + "".join(self.stderr))
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server did not start:\n" + "".join(self.stderr))


def start_server(database_url: str, extra_env: dict[str, str] | None = None, args: tuple[str, ...] = (),
                 initial_api_key: str | None = None, port: int | None = None) -> Server:
    """A ``gdpfed serve`` process on a loopback port (not yet waited for: ``wait_ready``)."""
    port = port or free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), **(extra_env or {})}
    env.pop("GDPFED_INITIAL_API_KEY", None)
    if initial_api_key is not None:
        env["GDPFED_INITIAL_API_KEY"] = initial_api_key
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
         "--database-url", database_url, "--log-level", "warning", *args],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    return Server(process, f"http://127.0.0.1:{port}")


def stop_server(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


@contextmanager
def serve(database_url: str, extra_env: dict[str, str] | None = None, args: tuple[str, ...] = (),
          initial_api_key: str | None = None) -> Iterator[Server]:
    server = start_server(database_url, extra_env, args, initial_api_key)
    try:
        server.wait_ready()
        yield server
    finally:
        stop_server(server)


def test_service_end_to_end_and_restart(tmp_path: Path) -> None:
    database_url = f"sqlite:///{tmp_path / 'gdpfed.db'}"
    with serve(database_url) as server:
        printed = "".join(server.stderr)
        assert f"{server.base_url}/docs" in printed
        token = re.search(r"^\s+(gdpfed_\S+)$", printed, re.MULTILINE).group(1)  # type: ignore[union-attr]
        api = httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60)

        population = api.post("/v1/populations", json={"name": "hospitals", "scenario": SMALL_SCENARIO})
        assert population.status_code == 201, population.text
        population_id = population.json()["id"]
        plan = api.post(f"/v1/populations/{population_id}/plans")
        assert plan.status_code == 201, plan.text
        plan = plan.json()
        assert plan["start_round"] == 0 and plan["population_id"] == population_id

        for index in (0, 1, 2, 2, 3, 4):  # round 2 twice
            response = api.post(f"/v1/plans/{plan['id']}/rounds", json={"round_index": index, "metrics": {"loss": 1.0}})
            assert response.status_code in (200, 201), response.text
        assert response.json()["duplicate"] is False
        duplicate = api.post(f"/v1/plans/{plan['id']}/rounds", json={"round_index": 2}, )
        assert duplicate.status_code == 200 and duplicate.json()["duplicate"] is True

        ledger = api.get(f"/v1/plans/{plan['id']}/ledger").json()
        assert ledger["rounds_reported"] == 5 and ledger["rounds_counted"] == 5
        strict_spent = {g["id"]: g for g in ledger["groups"]}["strict"]["epsilon_spent"]
        assert 0 < strict_spent < 1.0

        too_low = api.patch(f"/v1/populations/{population_id}/groups/strict", json={"epsilon": strict_spent / 2})
        assert too_low.status_code == 409 and too_low.json()["code"] == "budget_conflict"

        change = api.patch(f"/v1/populations/{population_id}/groups/strict", json={"epsilon": 1.5})
        assert change.status_code == 200, change.text
        replan = change.json()["plan"]
        assert replan["parent_plan_id"] == plan["id"] and replan["start_round"] == 5
        assert change.json()["population"]["active_plan_id"] == replan["id"]
        assert api.post(f"/v1/plans/{replan['id']}/rounds", json={"round_index": 5}).status_code == 201

        child_ledger = api.get(f"/v1/plans/{replan['id']}/ledger").json()
        strict = {g["id"]: g for g in child_ledger["groups"]}["strict"]
        assert strict["steps"] == 6 and strict["epsilon"] == 1.5
        assert strict["epsilon_spent"] > strict_spent

        metrics = httpx.get(f"{server.base_url}/metrics").text
        assert 'gdpfed_plans_created_total{kind="population"} 1.0' in metrics
        before = {
            "population": api.get(f"/v1/populations/{population_id}").json(),
            "changes": api.get(f"/v1/populations/{population_id}/changes").json(),
            "plans": api.get("/v1/plans").json(),
            "ledger": child_ledger,
            "plan": api.get(f"/v1/plans/{replan['id']}").json(),
        }
        api.close()

    with serve(database_url) as server:
        assert "gdpfed_" not in "".join(server.stderr)  # the key is never printed again
        api = httpx.Client(base_url=server.base_url, headers={"X-API-Key": token}, timeout=60)
        after = {
            "population": api.get(f"/v1/populations/{population_id}").json(),
            "changes": api.get(f"/v1/populations/{population_id}/changes").json(),
            "plans": api.get("/v1/plans").json(),
            "ledger": api.get(f"/v1/plans/{replan['id']}/ledger").json(),
            "plan": api.get(f"/v1/plans/{replan['id']}").json(),
        }
        assert after == before
        again = api.post(f"/v1/plans/{replan['id']}/rounds", json={"round_index": 5})
        assert again.json()["duplicate"] is True
        api.close()


def test_concurrent_http_reports(tmp_path: Path) -> None:
    """Many clients reporting overlapping rounds to one real server: exact count."""
    database_url = f"sqlite:///{tmp_path / 'gdpfed.db'}"
    with serve(database_url) as server:
        token = re.search(r"^\s+(gdpfed_\S+)$", "".join(server.stderr), re.MULTILINE).group(1)  # type: ignore[union-attr]
        headers = {"Authorization": f"Bearer {token}"}
        plan = httpx.post(f"{server.base_url}/v1/plans", json={"scenario": SMALL_SCENARIO}, headers=headers,
                          timeout=60).json()
        statuses: list[int] = []
        lock = threading.Lock()

        def worker(offset: int) -> None:
            with httpx.Client(base_url=server.base_url, headers=headers, timeout=60) as client:
                for i in range(10):
                    status = client.post(f"/v1/plans/{plan['id']}/rounds",
                                         json={"round_index": (offset + i) % 40}).status_code
                    with lock:
                        statuses.append(status)

        threads = [threading.Thread(target=worker, args=(5 * t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(statuses) == 80 and set(statuses) <= {200, 201}
        assert statuses.count(201) == 40
        ledger = httpx.get(f"{server.base_url}/v1/plans/{plan['id']}/ledger", headers=headers, timeout=60).json()
        assert ledger["rounds_reported"] == 40


@pytest.mark.parametrize(
    ("bad", "needles"),
    [
        (["--port", "70000"], ["port"]),
        (["--database-url", "not a url"], ["database-url", "cannot parse"]),
        (["--database-url", "mysql://user@localhost/gdpfed"], ["database-url", "driver", "not installed"]),
        (["--database-url", "sqlite:////nonexistent-dir/gdpfed.db"], ["database-url", "cannot connect"]),
        (["--database-url", "postgresql://user:secret@127.0.0.1:PORT/gdpfed"],
         ["database-url", "postgresql"]),  # unreachable, or the postgres extra missing: either names it
        (["--port", "BUSY"], ["port", "already in use"]),
    ],
)
def test_serve_rejects_bad_settings(bad: list[str], needles: list[str], tmp_path: Path) -> None:
    """Issue 9 §5: one line, exit 2, no traceback, and no docs URL printed first."""
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        args = [a.replace("PORT", str(free_port())) if a != "BUSY" else port for a in bad]
        if "--database-url" not in args:
            args += ["--database-url", f"sqlite:///{tmp_path / 'ok.db'}"]
        result = subprocess.run([sys.executable, "-m", "app.cli", "serve", *args], cwd=REPO, capture_output=True,
                                text=True, timeout=180, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "/docs" not in result.stderr and "secret" not in result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
