"""Every accountant x every question, through the library, ``gdpfed account`` and HTTP: one answer.

docs/accounting.md §10, §12. The three front doors share the request models and the
registry, so each cell must give the same JSON three times; every answer is sound
(``sound`` is true exactly when the returned values meet the target), and where the
closed form misses its target the answer is rdp's, ``replaced`` and still ``sound``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, get_args

import pytest

from accounting.accountants import AccountantName
from accounting.requests import EpsilonRequest, NoiseMultiplierRequest, RoundsRequest, SamplingRateRequest, answer
from app.cli import run
from app.main import create_app
from app.settings import Settings
from tests.app.conftest import OPERATOR_TOKEN, TestClient, auth

NAMES = get_args(AccountantName)
MODELS: dict[str, type[Any]] = {
    "epsilon": EpsilonRequest,
    "noise-multiplier": NoiseMultiplierRequest,
    "sampling-rate": SamplingRateRequest,
    "rounds": RoundsRequest,
}
# Parameters where every accountant answers quickly (PRV included) and the closed form holds.
BODIES: dict[str, dict[str, Any]] = {
    "epsilon": {"sampling_rate": 0.05, "noise_multiplier": 1.2, "rounds": 50, "delta": 1e-5},
    "noise-multiplier": {"sampling_rate": 0.05, "rounds": 50, "epsilon": 2.0, "delta": 1e-5},
    "sampling-rate": {"noise_multiplier": 1.2, "rounds": 50, "epsilon": 2.0, "delta": 1e-5},
    "rounds": {"sampling_rate": 0.05, "noise_multiplier": 1.2, "epsilon": 2.0, "delta": 1e-5},
}
# Where the paper's formula under-noises (docs/accounting.md §6.2): q = 0.1, T = 1, eps = 2.
FORMULA_MISSES: dict[str, dict[str, Any]] = {
    "noise-multiplier": {"sampling_rate": 0.1, "rounds": 1, "epsilon": 2.0, "delta": 1e-3},
    "sampling-rate": {"noise_multiplier": 0.526, "rounds": 1, "epsilon": 2.0, "delta": 1e-3},
    "rounds": {"sampling_rate": 0.1, "noise_multiplier": 0.53, "epsilon": 2.0, "delta": 1e-3},
}
CELLS = [(name, question, BODIES[question]) for name in NAMES for question in MODELS] + [
    ("closed_form", question, body) for question, body in FORMULA_MISSES.items()
]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """One service for the whole matrix (a fresh app per cell would double the file's time)."""
    db = tmp_path_factory.mktemp("matrix") / "gdpfed.db"
    settings = Settings(database_url=f"sqlite:///{db}", initial_api_key=OPERATOR_TOKEN, compute_timeout_seconds=60)
    with TestClient(create_app(settings, announce_key=False), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def planner_token(client: TestClient) -> str:
    response = client.post("/v1/keys", json={"name": "matrix-planner", "role": "planner"}, headers=auth(OPERATOR_TOKEN))
    assert response.status_code == 201, response.text
    return str(response.json()["token"])


def _cli(capsys: pytest.CaptureFixture[str], question: str, body: dict[str, Any]) -> dict[str, Any]:
    argv = ["account", "--json", question]
    for field, value in body.items():
        argv += [f"--{field.replace('_', '-')}", str(value)]
    code = run(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return dict(json.loads(captured.out))


@pytest.mark.parametrize(("accountant", "question", "parameters"), CELLS)
def test_library_cli_and_http_give_one_sound_answer(
    client: TestClient,
    planner_token: str,
    capsys: pytest.CaptureFixture[str],
    accountant: str,
    question: str,
    parameters: dict[str, Any],
) -> None:
    body = {**parameters, "accountant": accountant}
    library = answer(MODELS[question].model_validate(body)).model_dump(mode="json")
    response = client.post(f"/v1/accounting/{question}", json=body, headers=auth(planner_token))
    assert response.status_code == 200, response.text
    assert response.json() == library
    assert _cli(capsys, question, body) == library

    assert library["accountant"] == accountant and not library["fallback"]
    if question == "epsilon":
        return
    assert library["sound"] is True  # no raw formula here: every returned value meets its target
    if library["rounds"] > 0:
        assert library["epsilon"] <= library["target_epsilon"]
    if parameters is FORMULA_MISSES.get(question):
        assert library["replaced"] is True and library["accountant_used"] == "rdp"
    else:
        assert library["replaced"] is False and library["accountant_used"] == accountant


def test_raw_closed_form_is_the_one_unsound_answer(
    client: TestClient, planner_token: str, capsys: pytest.CaptureFixture[str]
) -> None:
    body = {**FORMULA_MISSES["noise-multiplier"], "accountant": "closed_form", "raw": True}
    response = client.post("/v1/accounting/noise-multiplier", json=body, headers=auth(planner_token))
    data = response.json()
    assert response.status_code == 200 and data["sound"] is False and data["replaced"] is False
    assert data["epsilon"] > data["target_epsilon"]
    argv = ["account", "--json", "noise-multiplier", "--sampling-rate", "0.1", "--rounds", "1", "--epsilon", "2",
            "--delta", "1e-3", "--accountant", "closed_form", "--raw"]
    assert run(argv) == 0 and json.loads(capsys.readouterr().out) == data


def test_openapi_accountant_enums_are_the_registry_names(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    found = 0
    for name, schema in schemas.items():
        for field in ("accountant", "accountant_used"):
            prop = schema.get("properties", {}).get(field)
            if prop is not None:
                # the fields refer to one named enum (app/openapi.py), inline or as a union member
                option = next((option for option in prop.get("anyOf", []) if "$ref" in option), prop)
                enum = schemas[option["$ref"].rsplit("/", 1)[-1]]["enum"] if "$ref" in option else None
                assert enum == list(NAMES), (name, field, prop)
                found += 1
    assert found >= 8  # the 4 requests, the 2 answers (x2 fields), plan summaries, ledgers, scenarios
