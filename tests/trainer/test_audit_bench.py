"""``gdpfed bench audit`` runs (small rows); its numbers live in docs/benchmarks.md."""

from __future__ import annotations

from bench import audit as suite
from bench.cli import SUITES


def test_the_audit_suite_is_registered_and_measures_every_audit() -> None:
    assert SUITES["audit"] == "bench.audit"
    rows = suite.tightness_rows([400])
    assert [row["mechanism"] for row in rows] == ["client", "silo", "metric", "discrete"]
    for row in rows:
        assert 0 <= row["lower_/_accounted"] < 1 and row["cpu_s"] > 0
