"""The service refuses a bad adaptive_clip block with 422 naming the field (docs/planning.md §15)."""

from __future__ import annotations

from tests.app.conftest import SMALL_SCENARIO, TestClient


def test_bad_adaptive_clip_block_is_422_naming_the_field(client: TestClient) -> None:
    bad = client.post("/v1/plans", json={"scenario": SMALL_SCENARIO | {"adaptive_clip": {"target_quantile": 2}}})
    assert bad.status_code == 422 and bad.json()["field"] == "scenario.adaptive_clip.target_quantile"
    small = client.post("/v1/plans", json={"scenario": SMALL_SCENARIO | {"adaptive_clip": {"count_noise_std": 0.1}},
                                           "method": "gdpfed"})
    # the planner's refusal names the field as the body spells it, like pydantic's checks above
    assert small.status_code == 422 and small.json()["field"] == "scenario.adaptive_clip.count_noise_std"
    good = client.post("/v1/plans", json={"scenario": SMALL_SCENARIO | {"adaptive_clip": {}}, "method": "gdpfed"})
    assert good.status_code == 201, good.text
    pools = good.json()["pools"]
    assert all(p["update_noise_multiplier"] >= p["noise_multiplier"] for p in pools)
