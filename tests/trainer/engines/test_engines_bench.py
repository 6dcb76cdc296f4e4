import pytest


def test_trainer_benchmark_runs_quick() -> None:
    from bench.trainer import run

    tables = run(quick=True)
    title, rows = tables[0]
    assert "batched vs loop" in title
    assert [(r["model"], r["clients"]) for r in rows] == [("cnn", 8), ("lstm", 8)]
    for row in rows:
        assert row["loop_updates_per_s"] > 0 and row["batched_updates_per_s"] > 0
        assert abs(row["ratio"] - row["batched_updates_per_s"] / row["loop_updates_per_s"]) < 1e-9
        assert row["device"] == "cpu" and row["params"] > 0


@pytest.mark.parametrize(
    ("command", "needle"),
    [(["bench", "planner", "--quick", "--device", "cpu"], "--device is for the trainer suite"),
     (["bench", "trainer", "--quick", "--device", "cuda:7"], "device")],
)
def test_bench_device_errors_are_one_line(command, needle, capsys, monkeypatch) -> None:
    import torch

    from app import cli as app_cli

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same on a GPU machine
    code = app_cli.run(command)
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err
