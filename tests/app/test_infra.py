"""Persistence, migrations, metrics, error mapping, limits and settings."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from fastapi import FastAPI
from sqlalchemy import inspect

from app.compute import ComputePool
from app.db import is_busy_error, make_engine, read_session, session_factory, with_busy_retry, write_transaction
from app.errors import ServiceError, install_error_handlers, location_to_field
from app.limits import BodySizeLimitMiddleware
from app.main import create_app
from app.migrate import current_revision, head_revision, upgrade_head
from app.models import ApiKey, Base
from app.settings import Settings
from tests.app.conftest import OPERATOR_TOKEN, TestClient, auth


def test_migrations_match_the_models(backend_url: str) -> None:
    engine = make_engine(backend_url)
    upgrade_head(engine)
    upgrade_head(engine)  # idempotent
    assert current_revision(engine) == head_revision()
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []
    assert set(inspect(engine).get_table_names()) >= {
        "api_keys", "plans", "ledger_rounds", "populations", "population_groups", "population_changes",
    }


def test_downgrade_then_upgrade(backend_url: str) -> None:
    from alembic import command

    from app.migrate import alembic_config

    engine = make_engine(backend_url)
    upgrade_head(engine)
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "base")
    assert "plans" not in inspect(engine).get_table_names()
    upgrade_head(engine)
    assert "plans" in inspect(engine).get_table_names()


def test_plans_with_rounds_from_before_0006_are_counted_as_the_continuous_mechanism(backend_url: str) -> None:
    """Issue 27: every round reported before revision 0006 came from a trainer that ran the
    continuous Gaussian; its client plans get that mechanism, plans without rounds none, so a
    later report of another mechanism on them is refused (tests/app/test_attached_discrete.py)."""
    from alembic import command
    from sqlalchemy import text

    from app.migrate import alembic_config

    engine = make_engine(backend_url)
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0005_ledger_round_participants")
    with engine.begin() as connection:
        for plan_id, unit in (("reported", "client"), ("fresh", "client"), ("silo", "silo_sample")):
            connection.execute(text(
                "INSERT INTO plans (id, created_at, method, privacy_unit, start_round, rounds, document) "
                "VALUES (:id, CURRENT_TIMESTAMP, 'gdpfed_plus', :unit, 0, 5, '{}')"), {"id": plan_id, "unit": unit})
        for plan_id in ("reported", "silo"):
            connection.execute(text(
                "INSERT INTO ledger_rounds (plan_id, round_index, aborted_pools, metrics, reported_at, status) "
                "VALUES (:id, 0, '[]', '{}', CURRENT_TIMESTAMP, 'completed')"), {"id": plan_id})
    upgrade_head(engine)
    with engine.connect() as connection:
        stored: dict[str, str | None] = dict(connection.execute(text("SELECT id, secagg_mechanism FROM plans")).fetchall())
    assert stored == {"reported": "gaussian_continuous", "fresh": None, "silo": None}


def test_sqlite_connection_settings(db_url: str) -> None:
    engine = make_engine(db_url, busy_timeout_seconds=7)
    with engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 7000


def test_write_transaction_is_all_or_nothing(db_url: str) -> None:
    engine = make_engine(db_url)
    upgrade_head(engine)
    factory = session_factory(engine)
    with pytest.raises(RuntimeError):
        with write_transaction(factory) as session:
            session.add(ApiKey(name="a", role="planner", token_sha256="0" * 64))
            session.flush()
            raise RuntimeError("boom")
    with read_session(factory) as session:
        assert session.query(ApiKey).count() == 0


def test_write_transactions_take_the_lock_up_front(db_url: str) -> None:
    """A second writer waits for the first instead of interleaving (BEGIN IMMEDIATE)."""
    engine = make_engine(db_url, busy_timeout_seconds=0.2)
    upgrade_head(engine)
    factory = session_factory(engine)
    with write_transaction(factory):
        with pytest.raises(Exception) as caught:
            with write_transaction(factory):
                pass
        assert is_busy_error(caught.value)
        with read_session(factory) as session:  # readers are not blocked (WAL)
            assert session.query(ApiKey).count() == 0


def test_busy_retry_gives_up_after_attempts() -> None:
    from sqlalchemy.exc import OperationalError

    calls = []

    def always_busy() -> None:
        calls.append(1)
        raise OperationalError("BEGIN", {}, Exception("database is locked"))

    with pytest.raises(OperationalError):
        with_busy_retry(always_busy, attempts=3, base_delay=0.001)
    assert len(calls) == 3

    def other_error() -> None:
        calls.append(1)
        raise OperationalError("x", {}, Exception("no such table"))

    calls.clear()
    with pytest.raises(OperationalError):
        with_busy_retry(other_error, attempts=3, base_delay=0.001)
    assert len(calls) == 1


def test_metrics_registries_are_per_app(tmp_path: Path) -> None:
    apps = [
        create_app(Settings(database_url=f"sqlite:///{tmp_path / f'{i}.db'}", initial_api_key=OPERATOR_TOKEN),
                   announce_key=False)
        for i in range(2)
    ]
    with TestClient(apps[0]) as first, TestClient(apps[1]) as second:
        for _ in range(3):
            first.get("/healthz")
        first.get("/v1/plans/some-id", headers=auth(OPERATOR_TOKEN))
        second.get("/healthz")
        text_first = first.get("/metrics").text
        text_second = second.get("/metrics").text
    assert 'gdpfed_http_requests_total{method="GET",route="/healthz",status="200"} 3.0' in text_first
    assert 'gdpfed_http_requests_total{method="GET",route="/healthz",status="200"} 1.0' in text_second
    # Route templates, not raw paths, label the series.
    assert 'route="/v1/plans/{plan_id}",status="404"' in text_first
    assert "some-id" not in text_first
    assert "gdpfed_http_request_duration_seconds_bucket" in text_first


def test_unmatched_paths_share_one_label(client: TestClient) -> None:
    for path in ("/a", "/b", "/c"):
        assert client.get(path).json()["code"] == "not_found"
    assert 'route="unmatched",status="404"} 3.0' in client.get("/metrics").text


def _app_with(route_error: Exception) -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/boom")
    def boom() -> None:
        raise route_error

    return app


def test_unexpected_errors_become_json_500_without_internals() -> None:
    with TestClient(_app_with(KeyError("secret internals")), raise_server_exceptions=False) as client:
        response = client.get("/boom")
    assert response.status_code == 500
    assert response.json() == {"code": "internal_error", "message": "internal error; the server logged the details"}
    assert "secret" not in response.text


@pytest.mark.parametrize(
    ("error", "status", "code", "field"),
    [
        (ServiceError(409, "conflict", "no", "x"), 409, "conflict", "x"),
        (__import__("accounting.errors").errors.InvalidInputError("delta", "must be < 1"), 422, "invalid_input", "delta"),
        (__import__("accounting.errors").errors.InfeasibleError("too few clients"), 422, "infeasible", None),
    ],
)
def test_project_errors_are_mapped(error: Exception, status: int, code: str, field: str | None) -> None:
    with TestClient(_app_with(error), raise_server_exceptions=False) as client:
        response = client.get("/boom")
    assert response.status_code == status
    assert response.json()["code"] == code
    assert response.json().get("field") == field


def test_request_validation_names_the_first_field(client: TestClient) -> None:
    response = client.post("/v1/plans/x/rounds", json={"round_index": -1})
    assert response.status_code == 422
    assert response.json()["code"] == "invalid_input"
    assert response.json()["field"] == "round_index"
    unknown = client.post("/v1/plans/x/rounds", json={"round_index": 1, "extra": 1})
    assert unknown.json()["field"] == "extra"
    not_json = client.post("/v1/plans/x/rounds", content=b"{not json", headers={"Content-Type": "application/json"})
    assert not_json.status_code == 422 and not_json.json()["code"] == "invalid_input"
    assert location_to_field(("body", "scenario", "groups", 1, "epsilon")) == "scenario.groups.1.epsilon"


def test_body_size_limit(db_url: str) -> None:
    settings = Settings(database_url=db_url, initial_api_key=OPERATOR_TOKEN, max_request_bytes=2048)
    with TestClient(create_app(settings, announce_key=False), headers=auth(OPERATOR_TOKEN)) as client:
        big = client.post("/v1/plans/x/rounds", content=b"x" * 5000, headers={"Content-Type": "application/json"})
        assert big.status_code == 413 and big.json()["code"] == "payload_too_large"

        def chunks():  # no Content-Length: the limit is enforced while reading
            for _ in range(10):
                yield b"x" * 1000

        chunked = client.post("/v1/plans/x/rounds", content=chunks(), headers={"Content-Type": "application/json"})
        assert chunked.status_code == 413


def test_body_size_middleware_passes_small_bodies() -> None:
    app = FastAPI()

    @app.post("/echo")
    def echo(body: dict[str, int]) -> dict[str, int]:
        return body

    limited = BodySizeLimitMiddleware(app, max_bytes=1024)
    with TestClient(limited) as client:  # type: ignore[arg-type]
        assert client.post("/echo", json={"a": 1}).json() == {"a": 1}


def _index_error() -> None:
    [][1]  # raises IndexError in the worker


def _divide_by_zero() -> float:
    return 1.0 / 0.0


def _overflow() -> float:
    return 10.0 ** 400


def _invalid() -> None:
    from accounting.errors import InvalidInputError

    raise InvalidInputError("sampling_rate", "must be in (0, 1]")


def _validation_error() -> None:
    from planner.schema import Scenario

    Scenario.model_validate({"groups": [], "delta": 2})


def _pid_after(seconds: float) -> int:
    import os

    time.sleep(seconds)
    return os.getpid()


def _start_grandchild_and_hang(pid_file: str) -> None:
    """A computation that forked a helper (as PRV does) and then overran its time limit."""
    import subprocess

    helper = subprocess.Popen(["sleep", "60"])
    Path(pid_file).write_text(str(helper.pid))
    time.sleep(60)


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie awaiting its parent's wait() is dead too
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_compute_pool_time_limit_and_errors() -> None:
    from accounting.errors import InvalidInputError

    timeouts = []
    pool = ComputePool(workers=2, timeout_seconds=60, on_timeout=lambda: timeouts.append(1))
    try:
        assert pool.run(sum, [1, 2, 3]) == 6  # the first call also waits for the workers to start
        pool.timeout_seconds = 0.2
        with pytest.raises(ServiceError) as caught:
            pool.run(time.sleep, 5)
        assert caught.value.status == 503 and caught.value.code == "timeout"
        assert timeouts == [1]
        pool.timeout_seconds = 30
        with pytest.raises(IndexError):  # the function's own errors pass through
            pool.run(_index_error)
        with pytest.raises(InvalidInputError) as invalid:  # project errors keep their type and field
            pool.run(_invalid)
        assert invalid.value.field == "sampling_rate" and "must be in" in invalid.value.message
        with pytest.raises(InvalidInputError) as validation:
            pool.run(_validation_error)
        assert validation.value.field in ("groups", "delta")
        from accounting import noise_multiplier

        # PRV computes in fenced child processes of its own: a worker may start them
        calibrated = pool.run(noise_multiplier, 0.1, 100, 1.0, 1e-5, "prv")
        assert calibrated.accountant_used == "prv" and not calibrated.fallback
    finally:
        pool.shutdown()


def test_timed_out_computations_are_killed_with_their_children(tmp_path: Path) -> None:
    """Issue 15: an abandoned computation must not keep running and slow the requests after it."""
    pool = ComputePool(workers=1, timeout_seconds=30)
    try:
        assert pool.run(_pid_after, 0) > 0  # the worker has imported this module
        [before] = pool.worker_pids()
        pid_file = tmp_path / "helper.pid"
        pool.timeout_seconds = 2.0
        with pytest.raises(ServiceError):
            pool.run(_start_grandchild_and_hang, str(pid_file))
        helper = int(pid_file.read_text())
        deadline = time.monotonic() + 10
        while (_alive(before) or _alive(helper)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(before), "the overrunning worker still runs"
        assert not _alive(helper), "the worker's child still runs"
        [after] = pool.worker_pids()
        assert after != before and _alive(after)
        pool.timeout_seconds = 30
        assert pool.run(sum, [2, 3]) == 5  # the replacement answers
    finally:
        pool.shutdown()


def test_compute_runs_in_separate_processes() -> None:
    import os
    from concurrent.futures import ThreadPoolExecutor

    pool = ComputePool(workers=2, timeout_seconds=30)
    try:
        with ThreadPoolExecutor(2) as callers:
            pids = set(callers.map(lambda _: pool.run(_pid_after, 0.5), range(2)))
        assert len(pids) == 2 and os.getpid() not in pids
        workers = pool.worker_pids()
    finally:
        pool.shutdown()
    assert not any(_alive(pid) for pid in workers)


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GDPFED_DATABASE_URL", "sqlite:////tmp/elsewhere.db")
    monkeypatch.setenv("GDPFED_PORT", "9001")
    monkeypatch.setenv("GDPFED_COMPUTE_TIMEOUT_SECONDS", "2.5")
    monkeypatch.setenv("GDPFED_LOG_LEVEL", "warning")
    settings = Settings()
    assert (settings.database_url, settings.port, settings.compute_timeout_seconds, settings.log_level) == (
        "sqlite:////tmp/elsewhere.db", 9001, 2.5, "warning")
    monkeypatch.setenv("GDPFED_PORT", "-1")
    with pytest.raises(ValueError):
        Settings()


def test_default_database_is_a_file_in_the_working_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GDPFED_DATABASE_URL", raising=False)
    assert Settings().database_url == "sqlite:///./gdpfed.db"


def test_healthz(client: TestClient) -> None:
    assert client.get("/healthz", headers={"Authorization": ""}).json() == {"status": "ok", "database": "sqlite"}


def test_compute_pool_survives_a_restarted_lifespan() -> None:
    pool = ComputePool(workers=1, timeout_seconds=30)
    assert pool.run(sum, [1, 2]) == 3
    pool.shutdown()
    assert pool.run(sum, [3, 4]) == 7
    pool.shutdown()


def test_compute_pool_async_time_limit() -> None:
    import asyncio

    pool = ComputePool(workers=2, timeout_seconds=30)
    try:
        assert asyncio.run(pool.run_async(sum, [1, 2])) == 3
        pool.timeout_seconds = 0.2
        with pytest.raises(ServiceError) as caught:
            asyncio.run(pool.run_async(time.sleep, 5))
        assert caught.value.code == "timeout"
    finally:
        pool.shutdown()


def test_numeric_range_errors_are_infeasible_not_500() -> None:
    from accounting.errors import InfeasibleError

    pool = ComputePool(workers=1, timeout_seconds=30)
    try:
        with pytest.raises(InfeasibleError, match="ZeroDivisionError"):
            pool.run(_divide_by_zero)
        with pytest.raises(InfeasibleError, match="OverflowError"):
            pool.run(_overflow)
    finally:
        pool.shutdown()


def test_docs_work_offline(client) -> None:  # type: ignore[no-untyped-def]
    """Issue 9 §5: /docs loads its Swagger UI assets from the service, not from a CDN."""
    page = client.get("/docs")
    assert page.status_code == 200
    assert "cdn.jsdelivr.net" not in page.text and "unpkg.com" not in page.text
    import re

    assets = re.findall(r'(?:href|src)="([^"]+)"', page.text)
    for name in ("swagger-ui-bundle.js", "swagger-ui.css"):
        path = next(a for a in assets if a.endswith(name))
        assert path.startswith("/") and client.get(path).status_code == 200, path
