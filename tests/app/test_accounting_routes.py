"""The accounting endpoints answer exactly what ``gdpfed account`` / the library answer."""

from __future__ import annotations

import pytest

from accounting.requests import EpsilonRequest, NoiseMultiplierRequest, RoundsRequest, SamplingRateRequest, answer
from tests.app.conftest import TestClient, auth

CASES = [
    ("epsilon", EpsilonRequest, {"sampling_rate": 0.05, "noise_multiplier": 1.5, "rounds": 500, "delta": 1e-4}),
    ("noise-multiplier", NoiseMultiplierRequest,
     {"sampling_rate": 0.01, "rounds": 1000, "epsilon": 2.0, "delta": 1e-5, "accountant": "rdp"}),
    ("sampling-rate", SamplingRateRequest, {"noise_multiplier": 1.2, "rounds": 100, "epsilon": 3.0, "delta": 1e-5}),
    ("rounds", RoundsRequest, {"sampling_rate": 0.02, "noise_multiplier": 1.1, "epsilon": 2.0, "delta": 1e-5}),
]


@pytest.mark.parametrize(("path", "model", "body"), CASES)
def test_same_answer_as_the_library(client: TestClient, planner_token: str, path: str, model: type,
                                    body: dict) -> None:
    response = client.post(f"/v1/accounting/{path}", json=body, headers=auth(planner_token))
    assert response.status_code == 200, response.text
    assert response.json() == answer(model.model_validate(body)).model_dump(mode="json")


def test_reference_value(client: TestClient) -> None:
    body = {"sampling_rate": 0.05, "noise_multiplier": 1.5, "rounds": 500, "delta": 1e-4}
    assert client.post("/v1/accounting/epsilon", json=body).json()["epsilon"] == pytest.approx(3.61, abs=0.02)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"sampling_rate": 0.0, "rounds": 10, "epsilon": 1.0, "delta": 1e-5}, "sampling_rate"),
        ({"sampling_rate": 0.1, "rounds": 10, "epsilon": -1.0, "delta": 1e-5}, "epsilon"),
        ({"sampling_rate": 0.1, "rounds": 10, "epsilon": 1.0, "delta": 1.5}, "delta"),
        ({"sampling_rate": 0.1, "rounds": 0, "epsilon": 1.0, "delta": 1e-5}, "rounds"),
        ({"sampling_rate": 0.1, "rounds": 10, "epsilon": 1.0, "delta": 1e-5, "accountant": "magic"}, "accountant"),
        ({"sampling_rate": 0.1, "rounds": 10, "epsilon": 1.0, "delta": 1e-5, "epsilom": 1}, "epsilom"),
        ({"sampling_rate": 0.1, "rounds": 10, "epsilon": 1.0}, "delta"),
    ],
)
def test_field_level_errors(client: TestClient, body: dict, field: str) -> None:
    response = client.post("/v1/accounting/noise-multiplier", json=body)
    assert response.status_code == 422
    assert response.json()["code"] == "invalid_input" and response.json()["field"] == field


def test_nan_is_rejected(client: TestClient) -> None:
    response = client.post("/v1/accounting/epsilon",
                           content=b'{"sampling_rate": NaN, "noise_multiplier": 1, "rounds": 1, "delta": 1e-5}',
                           headers={"Content-Type": "application/json"})
    assert response.status_code == 422 and response.json()["field"] == "sampling_rate"
