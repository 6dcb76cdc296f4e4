"""The discrete pipeline's bench suite runs (one small row); its numbers live in docs/benchmarks.md."""

from __future__ import annotations

from bench import discrete as suite
from bench.cli import SUITES


def test_the_discrete_suite_is_registered_and_times_both_paths() -> None:
    assert SUITES["discrete"] == "bench.discrete"
    (row,) = suite.pipeline_rows([1_000], repeats=1)
    assert row["d_padded"] == 1024 and row["bits"] > 0
    assert row["discrete_client_ms"] > 0 and row["continuous_client_ms"] > 0
    assert 0 <= row["discretisation_overhead_%"] < 1


def test_the_round_table_times_both_mechanisms_through_the_engine_and_prints_ratios() -> None:
    (row,) = suite.round_rows([(256, 12)], rounds=1)
    assert row["continuous_graph"] == row["discrete_graph"] and row["continuous_graph"] != "aborted"
    for stage in ("privatize", "secagg"):
        assert row[f"continuous_{stage}_s"] >= 0 and row[f"discrete_{stage}_s"] > 0
        assert row[f"{stage}_ratio"] > 0
    assert row["round_ratio"] > 0
