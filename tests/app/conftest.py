"""Fixtures for the service tests: every test gets its own SQLite file and app.

Tests that take ``backend_url`` (or override ``db_url`` with it) run on SQLite and on
PostgreSQL: a fresh database per test on the server named by ``GDPFED_TEST_POSTGRES_URL``
(``.ci/run`` starts one; by hand: ``source .ci/postgres && start_test_postgres``). Without
that variable the PostgreSQL cases are skipped and say why.
"""

from __future__ import annotations

import os
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from accounting.events import Phase
from app.main import create_app
from app.settings import Settings
from planner.schema import GroupPlan, Plan, PoolPlan, Predicted, Scenario

with warnings.catch_warnings():
    # starlette's TestClient warns that it will move to httpx2; irrelevant to these tests.
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

OPERATOR_TOKEN = "op-test-token-0123456789abcdefghijklmnopqrstuvwxyz"


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'gdpfed.db'}"


POSTGRES_ENV = "GDPFED_TEST_POSTGRES_URL"


@pytest.fixture(scope="session")
def postgres_server_url() -> str:
    url = os.environ.get(POSTGRES_ENV)
    if not url:
        pytest.skip(f"{POSTGRES_ENV} is not set, so there is no PostgreSQL server to test against "
                    "(.ci/run starts one; by hand: source .ci/postgres && start_test_postgres)")
    return url


@pytest.fixture
def postgres_url(postgres_server_url: str) -> Iterator[str]:
    """A new, empty database on the test server, dropped afterwards."""
    from sqlalchemy import create_engine, text

    from app.db import parse_database_url

    server = parse_database_url(postgres_server_url)
    name = f"gdpfed_test_{uuid.uuid4().hex[:16]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        yield server.set(database=name).render_as_string(hide_password=False)
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The test's database on each backend the service supports."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'gdpfed.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def settings(db_url: str) -> Settings:
    return Settings(database_url=db_url, initial_api_key=OPERATOR_TOKEN, compute_timeout_seconds=60)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    app = create_app(settings, announce_key=False)
    with TestClient(app, raise_server_exceptions=False, headers=auth(OPERATOR_TOKEN)) as test_client:
        yield test_client


@pytest.fixture
def planner_token(client: TestClient) -> str:
    response = client.post("/v1/keys", json={"name": "planner-1", "role": "planner"})
    assert response.status_code == 201, response.text
    return str(response.json()["token"])


SMALL_SCENARIO = {
    "groups": [
        {"id": "strict", "epsilon": 1.0, "num_clients": 100},
        {"id": "medium", "epsilon": 2.0, "num_clients": 100},
        {"id": "loose", "epsilon": 4.0, "num_clients": 100},
    ],
    "delta": 1e-3,
    "rounds": 50,
    "clip_norm": 1.0,
    "model_dim": 10_000,
    "expected_clients": 30,
    "min_clients_per_pool": 1,
}


def hand_made_plan(rates: dict[str, float], sigmas: dict[str, float], rounds: int = 100,
                   start_round: int = 0, delta: float = 1e-5,
                   spent: dict[str, list[Phase]] | None = None) -> Plan:
    """A plan built without the planner (one pool per group), for ledger tests.

    Like a planner's plan it lists each group's history: ``spent[g]`` (phases of parent
    plans) followed by its own phase ``(q_g, sigma_g, rounds)``.
    """
    spent = spent or {}
    scenario = Scenario.model_validate({
        "groups": [{"id": g, "epsilon": 8.0, "num_clients": 1000} for g in rates],
        "delta": delta, "rounds": start_round + rounds, "model_dim": 10, "expected_clients": 10, "accountant": "rdp",
    })
    groups = [
        GroupPlan(id=g, epsilon=8.0, num_clients=1000, pool=f"P{g}", sampling_rate=q, expected_clients=q * 1000,
                  aggregation_weight=q * 1000 / 10, clip_norm=1.0, effective_noise_multiplier=sigmas[g],
                  phases=[*spent.get(g, []),
                          *([Phase(sampling_rate=q, noise_multiplier=sigmas[g], steps=rounds)]
                            if q > 0 and sigmas[g] > 0 and rounds > 0 else [])],
                  spent_phase_count=len(spent.get(g, [])))
        for g, q in rates.items()
    ]
    pools = [
        PoolPlan(id=f"P{g}", groups=[g], noise_multiplier=sigmas[g], noise_std=sigmas[g], keep_ratio=1.0,
                 expected_clients=rates[g] * 1000, secagg_threshold=1, noise_share_std=0.0,
                 abort_probability=0.0, expected_noise_inflation=1.0)
        for g in rates
    ]
    return Plan(method="gdpfed_plus", accountant="rdp", scenario=scenario, rounds=rounds,
                start_round=start_round, groups=groups, pools=pools,
                predicted=Predicted(noise_energy=0.0, sparsification_error=0.0, objective=0.0))


def store_plan(client: TestClient, plan: Plan, parent_id: str | None = None) -> str:
    """Store ``plan`` directly through the service layer; returns its id."""
    from app.db import write_transaction
    from app.services.plans import store_plan as store

    state = client.app.state.gdpfed  # type: ignore[attr-defined]
    with write_transaction(state.sessions) as session:
        return store(session, plan, created_by="test", parent_id=parent_id).id
