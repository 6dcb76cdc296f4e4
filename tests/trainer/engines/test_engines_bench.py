def test_trainer_benchmark_runs_quick() -> None:
    from bench.trainer import run

    tables = run(quick=True)
    title, rows = tables[0]
    assert "batched vs loop" in title
    assert [(r["model"], r["clients"]) for r in rows] == [("cnn", 8), ("lstm", 8)]
    for row in rows:
        assert row["loop_updates_per_s"] > 0 and row["batched_updates_per_s"] > 0
        assert abs(row["ratio"] - row["batched_updates_per_s"] / row["loop_updates_per_s"]) < 1e-9
