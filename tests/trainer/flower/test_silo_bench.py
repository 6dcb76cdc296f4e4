"""``gdpfed bench flower``'s silo table: a silo plan's round in gdpfed train and over LoopbackGrid."""

from __future__ import annotations


def test_the_silo_rows_time_the_same_plan_in_gdpfed_train_and_on_flower() -> None:
    from bench.flower_silo import measure

    rows = measure(2, 1, process_rounds=0)
    assert [r["executor"] for r in rows] == ["gdpfed train", "flower loopback"]
    for row in rows:
        assert row["unit"] == "silo_sample" and row["silos"] == 2 and row["rounds_measured"] == 1
        assert row["round_s"] > 0 and row["train_s"] > 0
    assert rows[0]["vs_train"] == 1.0
