"""The service benchmark runs (quick mode); its numbers live in docs/benchmarks.md."""

from __future__ import annotations

from bench.service import run


def test_service_benchmark_runs_quick() -> None:
    tables = run(quick=True)
    title, rows = tables[0]
    assert "Service" in title
    assert {(row["call"].split()[1], row["clients"]) for row in rows} == {
        ("/v1/plans", 1), ("/v1/plans", 32), ("/v1/accounting/noise-multiplier", 1),
        ("/v1/accounting/noise-multiplier", 32),
    }
    assert all(row["errors"] == 0 and row["requests"] > 0 and row["p99_ms"] >= row["p50_ms"] > 0 for row in rows)
    assert all(row["x_1_client"] > 0 for row in rows)
