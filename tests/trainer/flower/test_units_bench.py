"""``gdpfed bench flower``'s unit tables: a silo and a metric plan's round in gdpfed train and over LoopbackGrid."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(("unit", "size", "per_round"), [("silo_sample", 2, 2), ("metric_local", 4, 2)])
def test_the_unit_rows_time_the_same_plan_in_gdpfed_train_and_on_flower(unit: str, size: int, per_round: int) -> None:
    from bench.flower_units import measure

    rows = measure(unit, size, 1, process_rounds=0)
    assert [r["executor"] for r in rows] == ["gdpfed train", "flower loopback"]
    for row in rows:
        assert row["unit"] == unit and row["nodes"] == size and row["per_round"] == per_round
        assert row["rounds_measured"] == 1 and row["round_s"] > 0 and row["train_s"] > 0
    assert rows[0]["vs_train"] == 1.0
