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


def test_the_tff_table_times_gdpfed_and_says_why_the_peer_did_not_run(monkeypatch, tmp_path) -> None:
    """Without ``GDPFED_TFF_PYTHON`` the peer's cell says how to run it; with an interpreter that
    cannot start, the reason; gdpfed's round is timed either way and no ratio is made up."""
    from bench import discrete_tff

    monkeypatch.delenv(discrete_tff.TFF_PYTHON_VARIABLE, raising=False)
    (row,) = discrete_tff.tff_rows([(3, 256)], repeats=1)
    assert row["gdpfed_round_s"] > 0 and row["gdpfed_bits"] > 0
    assert row["tff_round_s"].startswith("not run: set GDPFED_TFF_PYTHON") and row["tff_over_gdpfed"] is None
    monkeypatch.setenv(discrete_tff.TFF_PYTHON_VARIABLE, str(tmp_path / "no-python"))
    (row,) = discrete_tff.tff_rows([(3, 256)], repeats=1)
    assert row["tff_round_s"].startswith("not run:") and row["tff_over_gdpfed"] is None


def test_gdpfed_side_of_the_tff_table_releases_the_clients_sum() -> None:
    """The timed round is the real pipeline: its decoded release is the clients' clipped sum
    plus noise of the stated variance (so the timing is of work that is done, not skipped)."""
    import numpy as np

    from bench import discrete_tff
    from planner.discrete import choose_scale
    from trainer.secagg import discrete as dm

    dimension, clients = 256, 4
    scale = choose_scale(1.0, dimension)
    params = dm.DiscreteParams.derived(1.0, scale, dimension, 1e-9, 30)
    rng = np.random.default_rng(1)
    updates = rng.normal(size=(clients, dimension)) / np.sqrt(dimension) * 0.5
    signs = dm.rotation_signs(0, dimension)
    shares = np.stack([dm.client_share(u, params, signs, rng, noise=False) for u in updates])
    released = dm.server_decode(dm.modular_sum(shares, params.bits), params, signs)
    assert np.allclose(released, updates.sum(axis=0), atol=clients * np.sqrt(dimension) / scale)
    seconds, bits = discrete_tff.gdpfed_round_s(clients, dimension, repeats=1)
    assert seconds > 0 and 2 <= bits <= 62
