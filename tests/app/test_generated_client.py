"""The HTTP API through a generated client (issue 31, docs/service.md §Clients).

A real ``gdpfed serve`` answers ``/openapi.json``; openapi-python-client 0.29.1 (the
generator ML engineers use) turns it into a client with no warning, and the three users'
workflows run through that client's typed functions and models: a planner plans and
compares; an operator registers a population, plans it, raises a budget and is refused a
lowering below what was spent (the 409 parsed as the error model); a trainer claims and
reports rounds (a duplicate, a round of the superseded plan) and reads the ledger; the
operator manages keys.

The generator needs a newer ruff than the project's dev pin, so it lives in a venv of its
own: ``.ci/run`` builds it and exports ``GDPFED_OPENAPI_GENERATOR`` (the executable). In CI
(``CI=true``) a missing generator fails the test; elsewhere it skips and says how to get one.
"""

from __future__ import annotations

import importlib
import inspect
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, get_args

import httpx
import pytest

from planner.service_api import ErrorBody, LedgerOut
from tests.app.conftest import OPERATOR_TOKEN, SMALL_SCENARIO
from tests.app.test_e2e import serve

GENERATOR_ENV = "GDPFED_OPENAPI_GENERATOR"
PACKAGE = "gdpfed_client"
CONFIG = f"project_name_override: gdpfed-client\npackage_name_override: {PACKAGE}\n"


@pytest.fixture(scope="module")
def generator() -> Path:
    given = os.environ.get(GENERATOR_ENV)
    if given and os.access(given, os.X_OK):
        return Path(given)
    why = (f"{GENERATOR_ENV} is not set to an openapi-python-client executable (.ci/run installs "
           "openapi-python-client==0.29.1 in a venv of its own and sets it)")
    (pytest.fail if os.environ.get("CI") == "true" else pytest.skip)(why)
    raise AssertionError  # unreachable: fail and skip raise


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    database = tmp_path_factory.mktemp("generated-client") / "gdpfed.db"
    with serve(f"sqlite:///{database}", initial_api_key=OPERATOR_TOKEN) as running:
        yield running


def generate(generator: Path, document: bytes, where: Path) -> str:
    """Run the generator on ``document``; its output (it must succeed)."""
    (where / "openapi.json").write_bytes(document)
    (where / "config.yaml").write_text(CONFIG)
    # its post-generation hooks run ruff: the generator's own, not the project's older pin
    env = {**os.environ, "PATH": f"{generator.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(
        [str(generator), "generate", "--path", "openapi.json", "--config", "config.yaml",
         "--output-path", str(where / "client"), "--overwrite"],
        cwd=where, env=env, capture_output=True, text=True, timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    return output


@pytest.fixture(scope="module")
def client_package(generator: Path, server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """The client generated from the running service's own document, imported."""
    where = tmp_path_factory.mktemp("generated")
    document = httpx.get(f"{server.base_url}/openapi.json", timeout=30)
    assert document.status_code == 200
    output = generate(generator, document.content, where)
    # a complete client: the generator says only what it generated (no duplicate models,
    # no schema it could not parse, no response it left out)
    assert [line for line in output.splitlines() if line.strip()] == [f"Generating {where / 'client'}"], output
    sys.path.insert(0, str(where / "client"))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(where / "client"))
        for name in [name for name in sys.modules if name == PACKAGE or name.startswith(PACKAGE + ".")]:
            del sys.modules[name]


def api(name: str) -> ModuleType:
    """One operation's module of the generated client, e.g. ``api("plans.create_plan")``."""
    return importlib.import_module(f"{PACKAGE}.api.{name}")


def test_the_three_users_workflows_through_the_generated_client(client_package: ModuleType, server: Any) -> None:
    models = importlib.import_module(f"{PACKAGE}.models")
    operator = client_package.AuthenticatedClient(base_url=server.base_url, token=OPERATOR_TOKEN, timeout=120)

    # --- the open operations take a client without a key ---------------------------------------
    # (the generator types an operation's client AuthenticatedClient where it names a security scheme)
    for name in ("operations.healthz", "operations.metrics"):
        annotation = inspect.signature(api(name).sync_detailed).parameters["client"].annotation
        assert set(get_args(annotation)) == {client_package.AuthenticatedClient, client_package.Client}, name
    anyone = client_package.Client(base_url=server.base_url, timeout=30)
    health = api("operations.healthz").sync(client=anyone)
    assert isinstance(health, models.Health) and health.status == "ok"
    assert b"gdpfed_" in api("operations.metrics").sync_detailed(client=anyone).content

    # --- key management (operator) ---------------------------------------------------------
    created = api("keys.create_key").sync(client=operator, body=models.KeyCreate(name="ml-engineer",
                                                                                 role=models.Role.PLANNER))
    assert isinstance(created, models.KeyCreated) and created.role == "planner" and created.token
    again = api("keys.create_key").sync(client=operator, body=models.KeyCreate(name="ml-engineer"))
    assert isinstance(again, models.ErrorBody) and again.code == "conflict" and again.field == "name"
    planner = client_package.AuthenticatedClient(base_url=server.base_url, token=created.token, timeout=120)
    me = api("keys.whoami").sync(client=planner)
    assert isinstance(me, models.KeyIdentity) and (me.name, me.role) == ("ml-engineer", "planner")
    forbidden = api("keys.list_keys").sync(client=planner)
    assert isinstance(forbidden, models.ErrorBody) and forbidden.code == "forbidden"

    # --- a planner plans and compares --------------------------------------------------------
    scenario = models.Scenario.from_dict(SMALL_SCENARIO)
    compared = api("plans.create_plan").sync(client=planner, body=models.PlanCreate(
        scenario=scenario, method=models.PlanCreateMethod.COMPARE))
    assert isinstance(compared, models.StoredPlan), compared
    assert compared.comparison and {row.method for row in compared.comparison} >= {models.PlanMethod.GDPFED_PLUS}
    assert compared.recommendation is not None and isinstance(compared.recommendation.method, models.PlanMethod)
    fetched = api("plans.get_plan").sync(plan_id=compared.id, client=planner)
    assert isinstance(fetched, models.StoredPlan) and fetched.id == compared.id
    assert isinstance(fetched.groups[0].status, models.GroupStatus)
    assert isinstance(fetched.groups[0].phases[0], models.PoissonSampledGaussian)
    page = api("plans.list_plans").sync(client=planner)
    assert isinstance(page, models.PlanPage) and [item.id for item in page.items] == [compared.id]
    missing = api("plans.get_plan").sync(plan_id="nope", client=planner)
    assert isinstance(missing, models.ErrorBody) and missing.code == "not_found"
    bad = api("plans.create_plan").sync(client=planner, body=models.PlanCreate(
        scenario=models.Scenario.from_dict({**SMALL_SCENARIO, "delta": 2.0})))
    assert isinstance(bad, models.ErrorBody) and (bad.code, bad.field) == ("invalid_input", "scenario.delta")

    # --- an operator registers a population and plans it ----------------------------------------
    population = api("populations.create_population").sync(client=operator, body=models.PopulationCreate(
        name="hospitals", scenario=scenario, method=models.PlanMethod.GDPFED_PLUS))
    assert isinstance(population, models.PopulationOut), population
    plan = api("populations.create_active_plan").sync(population_id=population.id, client=operator)
    assert isinstance(plan, models.StoredPlan) and plan.population_id == population.id

    # --- a trainer claims and reports rounds; the ledger -------------------------------------------
    report_round = api("ledger.report_round")
    for index in range(4):
        claimed = report_round.sync(plan_id=plan.id, client=operator,
                                    body=models.RoundReport(round_index=index, status=models.RoundStatus.STARTED))
        assert isinstance(claimed, models.RoundRecord) and claimed.status == "started"
        done = report_round.sync(plan_id=plan.id, client=operator, body=models.RoundReport(
            round_index=index, metrics=models.RoundReportMetrics.from_dict({"loss": 1.0 / (index + 1)})))
        assert isinstance(done, models.RoundRecord) and done.status == "completed" and not done.duplicate
    duplicate = report_round.sync_detailed(plan_id=plan.id, client=operator, body=models.RoundReport(round_index=3))
    assert duplicate.status_code == 200 and isinstance(duplicate.parsed, models.RoundRecord)
    assert duplicate.parsed.duplicate is True
    ledger = api("ledger.get_ledger").sync(plan_id=plan.id, client=planner)
    assert isinstance(ledger, models.LedgerOut) and ledger.rounds_counted == 4
    assert isinstance(ledger.accountant, models.AccountantName)
    # the generated model and the service's own (planner.service_api, the trainer's) read the same body
    assert LedgerOut.model_validate(ledger.to_dict()).rounds_counted == 4
    spent = {group.id: group.epsilon_spent for group in ledger.groups}
    assert all(value is not None and value > 0 for value in spent.values())

    # --- the operator raises a budget (a re-plan) and is refused a lowering below what was spent ---------
    raised = api("populations.patch_group").sync(population_id=population.id, group_id="loose", client=operator,
                                                 body=models.GroupPatch(epsilon=5.0))
    assert isinstance(raised, models.PopulationChangeResult), raised
    assert raised.plan is not None and raised.plan.parent_plan_id == plan.id and raised.plan.start_round == 4
    assert raised.population.active_plan_id == raised.plan.id
    lowered = api("populations.patch_group").sync_detailed(
        population_id=population.id, group_id="strict", client=operator,
        body=models.GroupPatch(epsilon=spent["strict"] * 0.5))
    assert lowered.status_code == 409 and isinstance(lowered.parsed, models.ErrorBody)
    assert lowered.parsed.field == "epsilon" and "spent" in lowered.parsed.message
    assert ErrorBody.model_validate(lowered.parsed.to_dict()) == ErrorBody.model_validate_json(lowered.content)
    changes = api("populations.list_changes").sync(population_id=population.id, client=planner)
    assert isinstance(changes, models.ChangePage)
    epsilon_changes = [change for change in changes.items if change.field == "epsilon"]
    assert [(change.group_id, change.plan_id) for change in epsilon_changes] == [("loose", raised.plan.id)]

    # a round of the old plan after the re-plan: 409 superseded, naming the plan to report to
    late = report_round.sync_detailed(plan_id=plan.id, client=operator, body=models.RoundReport(round_index=4))
    assert late.status_code == 409 and isinstance(late.parsed, models.ErrorBody)
    assert (late.parsed.code, late.parsed.superseded_by, late.parsed.start_round) == ("superseded", raised.plan.id, 4)
    child_ledger = api("ledger.get_ledger").sync(plan_id=raised.plan.id, client=planner)
    assert isinstance(child_ledger, models.LedgerOut) and child_ledger.start_round == 4

    # --- the operator revokes the planner's key ---------------------------------------------------
    revoked = api("keys.revoke_key").sync(name="ml-engineer", client=operator)
    assert isinstance(revoked, models.KeyOut) and revoked.revoked_at is not None
    refused = api("keys.whoami").sync(client=planner)
    assert isinstance(refused, models.ErrorBody) and refused.code == "unauthorized"
    keys = api("keys.list_keys").sync(client=operator)
    assert isinstance(keys, list) and {key.name for key in keys} >= {"ml-engineer"}
