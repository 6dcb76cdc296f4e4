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


def test_migrations_match_the_models(db_url: str) -> None:
    engine = make_engine(db_url)
    upgrade_head(engine)
    upgrade_head(engine)  # idempotent
    assert current_revision(engine) == head_revision()
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []
    assert set(inspect(engine).get_table_names()) >= {
        "api_keys", "plans", "ledger_rounds", "populations", "population_groups", "population_changes",
    }


def test_downgrade_then_upgrade(db_url: str) -> None:
    from alembic import command

    from app.migrate import alembic_config

    engine = make_engine(db_url)
    upgrade_head(engine)
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "base")
    assert "plans" not in inspect(engine).get_table_names()
    upgrade_head(engine)
    assert "plans" in inspect(engine).get_table_names()


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


def test_compute_pool_time_limit() -> None:
    timeouts = []
    pool = ComputePool(workers=2, timeout_seconds=0.05, on_timeout=lambda: timeouts.append(1))
    try:
        assert pool.run(sum, [1, 2, 3]) == 6
        with pytest.raises(ServiceError) as caught:
            pool.run(time.sleep, 0.5)
        assert caught.value.status == 503 and caught.value.code == "timeout"
        assert timeouts == [1]
        with pytest.raises(IndexError):  # the function's own errors pass through
            pool.run(lambda: [][1])
    finally:
        pool.shutdown()


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
    pool = ComputePool(workers=1, timeout_seconds=5)
    assert pool.run(sum, [1, 2]) == 3
    pool.shutdown()
    assert pool.run(sum, [3, 4]) == 7
    pool.shutdown()


def test_compute_pool_async_time_limit() -> None:
    import asyncio

    pool = ComputePool(workers=2, timeout_seconds=0.05)
    try:
        assert asyncio.run(pool.run_async(sum, [1, 2])) == 3
        with pytest.raises(ServiceError) as caught:
            asyncio.run(pool.run_async(time.sleep, 0.5))
        assert caught.value.code == "timeout"
    finally:
        pool.shutdown()


def test_numeric_range_errors_are_infeasible_not_500() -> None:
    from accounting.errors import InfeasibleError

    pool = ComputePool(workers=1, timeout_seconds=5)
    try:
        with pytest.raises(InfeasibleError, match="ZeroDivisionError"):
            pool.run(lambda: 1.0 / 0.0)
        with pytest.raises(InfeasibleError, match="OverflowError"):
            pool.run(lambda: 10.0 ** 400)
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
