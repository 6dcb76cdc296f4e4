"""The service stores and returns a plan's privacy unit (migration 0004, on SQLite).

A plan stored before the migration (a schema version 1 document in a row without the
column) is served afterwards as a version 2 ``client`` plan, listed with its unit, and
its ledger names the unit; a request for another unit is a 422 naming the field.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path

from alembic import command
from sqlalchemy import text

from app.db import make_engine
from app.main import create_app
from app.migrate import alembic_config
from app.settings import Settings
from planner.schema import load_plan
from tests.app.conftest import OPERATOR_TOKEN, SMALL_SCENARIO, TestClient, auth

V1 = Path(__file__).resolve().parents[1] / "planner" / "data" / "plan_v1.json"


def test_a_plan_stored_before_the_migration_is_served_as_a_client_plan(db_url: str) -> None:
    engine = make_engine(db_url)
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0003_plan_replan_fence")
    document = json.loads(V1.read_text())
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO plans (id, created_at, method, accountant, start_round, rounds, document) "
                "VALUES (:id, :at, :method, :accountant, 0, :rounds, :document)"
            ),
            {"id": "old1", "at": datetime.now(UTC), "method": document["method"], "accountant": document["accountant"],
             "rounds": document["rounds"], "document": json.dumps(document)},
        )
    engine.dispose()
    settings = Settings(database_url=db_url, initial_api_key=OPERATOR_TOKEN, compute_timeout_seconds=60)
    with TestClient(create_app(settings, announce_key=False), raise_server_exceptions=False,
                    headers=auth(OPERATOR_TOKEN)) as client:  # the app migrates to head on start
        served = client.get("/v1/plans/old1")
        assert served.status_code == 200, served.text
        plan = served.json()
        assert (plan["schema_version"], plan["privacy_unit"], plan["scenario"]["privacy_unit"]) == (2, "client", "client")
        assert plan["groups"] == document["groups"] and plan["pools"] == document["pools"]
        load_plan(plan)  # the trainer reads the response as is
        assert client.get("/v1/plans").json()["items"][0]["privacy_unit"] == "client"
        ledger = client.get("/v1/plans/old1/ledger")
        assert ledger.status_code == 200, ledger.text
        assert ledger.json()["privacy_unit"] == "client"
        created = client.post("/v1/plans", json={"scenario": SMALL_SCENARIO})
        assert created.status_code == 201 and created.json()["privacy_unit"] == "client"
        assert client.get("/v1/plans").json()["items"][0]["privacy_unit"] == "client"


def test_another_unit_is_a_422_naming_the_field(client: TestClient) -> None:
    scenario = {**copy.deepcopy(SMALL_SCENARIO), "privacy_unit": "silo_sample"}
    response = client.post("/v1/plans", json={"scenario": scenario})
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "scenario.privacy_unit"
    assert "client" in response.json()["message"]
