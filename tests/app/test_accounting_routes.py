"""The accounting endpoints: reference value and field-level errors (the same answers as
``gdpfed account`` and the library, for every accountant and question, are in
``test_accounting_matrix.py``)."""

from __future__ import annotations

import pytest

from tests.app.conftest import TestClient


def test_reference_value(client: TestClient) -> None:
    body = {"sampling_rate": 0.05, "noise_multiplier": 1.5, "rounds": 500, "delta": 1e-4}
    answer = client.post("/v1/accounting/epsilon", json=body).json()
    assert answer["epsilon"] == pytest.approx(3.239, abs=0.002) and answer["accountant"] == "pld"  # the default
    rdp = client.post("/v1/accounting/epsilon", json={**body, "accountant": "rdp"}).json()
    assert rdp["epsilon"] == pytest.approx(3.61, abs=0.02)


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
