"""The accounting benchmark suite runs (quick); the numbers live in docs/benchmarks.md."""

from __future__ import annotations

import pytest


def test_bench_rdp_table_short() -> None:
    from bench import accounting as suite

    rows = suite.rdp_table(suite.CASES[:1], repeats=1, opacus_repeats=1)
    assert len(rows) == 1 and rows[0]["sigma_gdpfed"] > 0 and rows[0]["opacus_ms"] > 0
    assert abs(rows[0]["diff_vs_opacus_tight_%"]) < 0.5


def test_bench_pld_row_short() -> None:
    # pld side by side with dp-accounting's fine-grid PLD calibration and Opacus' prv (issue 26)
    from bench import accounting as suite

    prv_rows = [suite._prv_row(*suite.CASES[1], quick=True)]
    rows = suite.pld_table(suite.CASES[1:2], repeats=1, prv_rows=prv_rows)
    assert len(rows) == 1 and rows[0]["pld_ms"] > 0 and rows[0]["dp_pld_s"] > 0
    assert abs(rows[0]["diff_vs_dp_pld_%"]) <= 0.5
    assert rows[0]["variance_rdp/pld"] > 1 and rows[0]["speedup_vs_opacus_prv"] > 0 and rows[0]["cpu_x_vs_opacus_prv"] > 0


@pytest.mark.slow
def test_bench_accounting_quick_runs() -> None:
    from bench import accounting as suite

    tables = suite.run(quick=True)
    titles = [title for title, _ in tables]
    assert len(tables) == 4 and "Accounting summary" in titles
    rdp_rows = tables[0][1]
    assert len(rdp_rows) == 2 and all(row["sigma_gdpfed"] > 0 and row["opacus_ms"] > 0 for row in rdp_rows)
    assert all(abs(row["diff_vs_opacus_tight_%"]) < 0.5 for row in rdp_rows)
    assert all(row["sigma_gdpfed"] > 0 for row in tables[1][1])
    assert all(abs(row["diff_vs_dp_pld_%"]) <= 0.5 for row in tables[2][1])
