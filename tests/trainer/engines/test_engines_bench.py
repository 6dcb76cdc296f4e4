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
    [(["bench", "planner", "--quick", "--device", "cpu"], "--device is for the trainer and dpsgd suites"),
     (["bench", "trainer", "--quick", "--device", "cuda:7"], "device")],
)
def test_bench_device_errors_are_one_line(command, needle, capsys, monkeypatch) -> None:
    import torch

    from app import cli as app_cli

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same on a GPU machine
    code = app_cli.run(command)
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err


def test_dpsgd_benchmark_runs_quick() -> None:
    """``gdpfed bench dpsgd --quick``: both engines ran the same sampled examples; the ratio is ours / Opacus'."""
    import os

    try:
        import opacus  # noqa: F401
    except ImportError:
        # .ci/run installs the dev extra, which has opacus: there its absence is a failure
        (pytest.fail if os.environ.get("CI") == "true" else pytest.skip)("opacus is not installed (pip install -e '.[dev]')")
    import torch

    from bench.dpsgd import run

    threads = torch.get_num_threads()
    [(title, rows)] = run(quick=True)
    assert "Opacus" in title and torch.get_num_threads() == threads  # the bench restores torch's threads
    assert [(r["model"], r["silos"]) for r in rows] == [("linear", 1), ("linear", 4)]
    for row in rows:
        assert row["gdpfed_examples_per_s"] > 0 and row["opacus_examples_per_s"] > 0
        assert abs(row["ratio"] - row["gdpfed_examples_per_s"] / row["opacus_examples_per_s"]) < 1e-9
        assert row["examples_per_pass"] > 0 and row["threads"] == 1 and row["device"] == "cpu"
        assert row["path"] == "ghost"  # the linear model is a chain of layers: the fast path ran
        assert len(row["load"].split()) == 3
