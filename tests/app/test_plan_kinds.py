"""The service stores and returns a plan's privacy unit (migration 0004, on SQLite).

A plan stored before the migration (a schema version 1 document in a row without the
column) is served afterwards as a version 2 ``client`` plan, listed with its unit, and
its ledger names the unit; a request for an unknown unit is a 422 naming the field.
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
from planner.units import UNITS, load_plan
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
        # the v1 content is served unchanged; fields added since (e.g. the pools' secagg_*)
        # come with their defaults, exactly as load_plan reads the document
        for key in ("groups", "pools"):
            assert [{name: row[name] for name in original} for row, original in zip(plan[key], document[key], strict=True)] == document[key]
        expected = load_plan(document).model_dump(mode="json")
        assert plan["groups"] == expected["groups"] and plan["pools"] == expected["pools"]
        load_plan(plan)  # the trainer reads the response as is
        assert client.get("/v1/plans").json()["items"][0]["privacy_unit"] == "client"
        ledger = client.get("/v1/plans/old1/ledger")
        assert ledger.status_code == 200, ledger.text
        assert ledger.json()["privacy_unit"] == "client"
        created = client.post("/v1/plans", json={"scenario": SMALL_SCENARIO})
        assert created.status_code == 201 and created.json()["privacy_unit"] == "client"
        assert client.get("/v1/plans").json()["items"][0]["privacy_unit"] == "client"


def test_an_unknown_unit_is_a_422_naming_the_field_and_metric_scenarios_are_planned(client: TestClient) -> None:
    scenario = {**copy.deepcopy(SMALL_SCENARIO), "privacy_unit": "cohort"}
    response = client.post("/v1/plans", json={"scenario": scenario})
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "scenario.privacy_unit"
    # one line naming the registry's units, not "Input tag 'cohort' does not match ..."
    assert response.json()["message"] == (
        f"scenario.privacy_unit: unknown privacy unit 'cohort'; the service plans {', '.join(UNITS)} scenarios"
    )
    # a metric scenario is planned (it was refused 422 before issue 29), labelled as leakage
    metric = json.loads((Path(__file__).resolve().parents[2] / "examples" / "metric.json").read_text())
    response = client.post("/v1/plans", json={"scenario": metric, "method": "metric_laplace"})
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["privacy_unit"] == "metric_local" and "accountant" not in body
    assert [g["max_participations"] for g in body["groups"]] == [None, 5]
    assert client.get("/v1/plans").json()["items"][0]["accountant"] is None  # leakage has no accountant
    assert client.post("/v1/plans", json={"scenario": metric}).json()["method"] == "metric_laplace"


SILO_SCENARIO = {
    "privacy_unit": "silo_sample",
    "silos": [{"id": "a", "num_samples": 400, "epsilon": 1.0}, {"id": "b", "num_samples": 100, "epsilon": 4.0}],
    "delta": 1e-5, "rounds": 10, "batch_size": 16, "clip_norm": 1.0,
}


def test_a_silo_scenario_is_planned_stored_and_labelled(client: TestClient) -> None:
    """POST /v1/plans takes a silo scenario (docs/mrmtl.md §2): every silo's sigma_k and its
    sample-level epsilon, labelled with the notion; its ledger is labelled silo sample-level
    and has no client-level figure (tests/app/test_unit_ledgers.py runs it)."""
    from planner.units import spent
    from planner.units.silo_sample import NOTION, SiloSamplePlan

    created = client.post("/v1/plans", json={"scenario": SILO_SCENARIO, "method": "ditto"})
    assert created.status_code == 201, created.text
    body = created.json()
    assert (body["privacy_unit"], body["method"], body["notion"]) == ("silo_sample", "ditto", NOTION)
    assert "groups" not in body and "pools" not in body  # no client-level figure beside it
    plan = SiloSamplePlan.model_validate({k: v for k, v in body.items()
                                          if k not in ("id", "created_at", "created_by", "population_id", "superseded_by")})
    final = spent(plan, plan.rounds)
    assert all((final[s.id] or 0.0) <= s.epsilon * (1 + 1e-9) for s in plan.silos)
    assert plan.silos[1].noise_multiplier < plan.silos[0].noise_multiplier  # its own sigma_k: b's looser budget outweighs its larger q_k
    served = client.get(f"/v1/plans/{body['id']}")
    assert served.status_code == 200 and served.json()["silos"] == body["silos"]
    assert client.get("/v1/plans").json()["items"][0]["privacy_unit"] == "silo_sample"
    assert client.post("/v1/plans", json={"scenario": SILO_SCENARIO}).json()["method"] == "mrmtl"
    ledger = client.get(f"/v1/plans/{body['id']}/ledger")
    assert ledger.status_code == 200, ledger.text
    assert (ledger.json()["label"], ledger.json()["notion"]) == ("silo sample-level", NOTION)
    assert "groups" not in ledger.json() and [s["epsilon_spent"] for s in ledger.json()["silos"]] == [0.0, 0.0]
    assert client.get("/v1/plans/nope/ledger").status_code == 404


def test_silo_and_client_methods_are_not_mixed(client: TestClient) -> None:
    wrong = client.post("/v1/plans", json={"scenario": SILO_SCENARIO, "method": "gdpfed_plus"})
    assert wrong.status_code == 422 and wrong.json()["field"] == "method", wrong.text
    assert "it plans client scenarios" in wrong.json()["message"], wrong.text
    wrong = client.post("/v1/plans", json={"scenario": SMALL_SCENARIO, "method": "mrmtl"})
    assert wrong.status_code == 422 and wrong.json()["field"] == "method", wrong.text
    # an unknown method: one line listing the planner's methods (the enum's own check, which
    # the OpenAPI document's PlanCreateMethod states, comes after and never speaks)
    known = ", ".join(dict.fromkeys(m for unit in UNITS.values() for m in unit.methods))
    for body in ({"scenario": SMALL_SCENARIO, "method": "fedsgd"}, {"scenario": SILO_SCENARIO, "method": 3}):
        wrong = client.post("/v1/plans", json=body)
        assert wrong.status_code == 422, wrong.text
        assert wrong.json() == {"code": "invalid_input", "field": "method",
                                "message": f"method: unknown method {body['method']!r}; known: {known}"}
    missing = client.post("/v1/plans", json={"scenario": {**SILO_SCENARIO, "silos": []}})
    assert missing.status_code == 422, missing.text
    assert missing.json()["field"].startswith("scenario.silos"), missing.text


def test_the_service_names_no_privacy_unit() -> None:
    """app/ reaches privacy units only through planner.units (issue 29): no unit's name is
    spelled in its code, pages or scripts (a quoted name, an import of a unit module), so a
    unit added to the registry needs no change there. Migrations are history and exempt."""
    import re

    app_dir = Path(__file__).resolve().parents[2] / "app"
    found = []
    for path in sorted(app_dir.rglob("*")):
        if path.suffix not in (".py", ".js", ".html") or "migrations" in path.parts or "vendor" in path.parts:
            continue
        text = path.read_text()
        for name in UNITS:
            pattern = rf"['\"]{name}['\"]|units\.{name}\b|units import [\w, ]*\b{name}\b"
            if "_" in name:
                pattern += rf"|\b{name}\b"
            found += [f"{path.relative_to(app_dir)}: {m.group(0)}" for m in re.finditer(pattern, text)]
    assert found == []
