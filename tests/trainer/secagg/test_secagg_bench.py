"""The secagg benchmark suite runs (quick) and reports every configuration it promises."""

from __future__ import annotations

from bench import secagg


def test_quick_suite_runs() -> None:
    tables = dict(secagg.run(quick=True))
    rounds = tables["Secure aggregation per round vs plain numpy sum"]
    assert {row["mode"] for row in rounds} == {"full", "sparse"}
    for row in rounds:
        assert row["secagg_s"] > 0 and row["plain_s"] > 0 and row["ratio"] > 0 and row["note"] == ""
    shamir_rows = tables["Shamir t-of-n of a 32-byte secret: gdpfed (numpy, GF(2^31-1)) vs PyCryptodome (GF(2^128))"]
    assert shamir_rows and all(row["gdpfed_s"] > 0 for row in shamir_rows)
