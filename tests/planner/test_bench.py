"""The planner benchmark suite runs (quick mode); its numbers live in docs/benchmarks.md."""

from __future__ import annotations

import pytest

pytest.importorskip("cvxpy")


def test_planner_bench_quick_runs():
    from bench.planner import run

    tables = run(quick=True)
    assert [title for title, _ in tables][0].startswith("KKT")
    qp_rows, plan_rows = tables[0][1], tables[1][1]
    assert [r["groups"] for r in qp_rows] == [3, 100]
    assert all(abs(r["objective_gap"]) < 1e-4 for r in qp_rows)
    assert [r["groups"] for r in plan_rows] == [3, 100]
    assert all(r["J_ratio"] >= 1 - 1e-6 for r in plan_rows)
    # issue 26: the derived clients_needed beside the re-planning search it replaced
    needed_rows = tables[2][1]
    assert [r["groups"] for r in needed_rows] == [3]
    assert needed_rows[0]["K_rho1_derived"] == pytest.approx(needed_rows[0]["K_rho1_replanned"], rel=0.025)
    # issue 26 §2: the targets table (the continuous plan, and with report_discrete), each row
    # beside the previous tree's recorded time and the ratio of the two
    target_rows = tables[4][1]
    assert [(r["groups"], r["accountant"]) for r in target_rows] == [(3, "rdp"), (3, "pld"), (3, "pld +discrete")]
    assert all(r["target_s"] == 0.02 and r["previous_s"] != "-" and r["warm_s"] > 0 for r in target_rows)
    assert all(r["x_faster"].endswith("x") for r in target_rows)
    # issue 26 §2: the floor under the 3-group target, the parts the other clauses require
    floor_rows = tables[5][1]
    assert [r["groups"] for r in floor_rows] == [3]
    (floor,) = floor_rows
    assert floor["floor_s"] == pytest.approx(floor["certify_s"] + floor["tight_figures_s"])
    assert 0 < floor["certify_s"] < floor["default_plan_cpu_s"] and floor["tight_figures_s"] > 0
