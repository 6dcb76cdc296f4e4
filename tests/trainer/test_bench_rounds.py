"""The round-time benchmark suite runs (quick) and its rows add up."""

from __future__ import annotations

from bench.rounds import run


def test_rounds_suite_quick():
    tables = run(quick=True)
    assert len(tables) == 1
    title, rows = tables[0]
    assert "secure-aggregation" in title
    assert {r["aggregation"] for r in rows} == {"secagg full", "secagg sparse (SecAgg+)", "unmasked sum (peer)"}
    for row in rows:
        assert 0 < row["secagg_share"] < 1
        parts = row["train_s"] + row["privatize_s"] + row["secagg_s"] + row["aggregate_s"] + row["account_s"]
        assert parts <= row["round_s"] * (1 + 1e-9)
        if row["aggregation"] == "unmasked sum (peer)":
            assert row["round_vs_unmasked"] == 1.0
