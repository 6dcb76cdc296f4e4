"""The round benchmark suite runs (quick) and its rows add up."""

from __future__ import annotations

from bench.rounds import run


def test_rounds_suite_quick():
    (stage_title, stages), (round_title, rounds) = run(quick=True)
    assert "on one core: ChaCha20" in stage_title and "X25519" in stage_title and "Round breakdown" in round_title
    assert "3 groups x 30 clients" in round_title and "evaluate_s" in round_title  # the quick setup, not the full one
    assert {(r["mode"], r["workers"]) for r in stages} == {("full", 1), ("full", 2), ("sparse", 1), ("sparse", 2),
                                                           ("exact_sum", None)}
    for row in stages:
        assert row["wall_s"] > 0 and row["note"].startswith("loadavg")
        if row["mode"] == "exact_sum":
            assert row["keystream_GB"] == 0
        else:  # the protocol generated keystream and ran two agreements per client per neighbour
            degree = row["clients"] - 1 if row["mode"] == "full" else row["k"]
            assert row["keystream_GB"] > 0 and row["floor_s"] > 0 and row["agreements"] == 2 * row["clients"] * degree
        # SecAgg+ rows also time the primitive calls alone, which the whole session cannot beat.
        assert (row["calls_s"] is not None) == (row["mode"] == "sparse")
        if row["calls_s"] is not None:
            assert 0 < row["calls_s"] and row["wall_vs_calls"] == row["wall_s"] / row["calls_s"]
        # m is the session threshold m_P; t the Shamir threshold of a share group (m itself in full mode).
        expected_t = {"full": row["m"], "exact_sum": None}.get(row["mode"], row["t"])
        assert row["t"] == expected_t and (row["mode"] != "sparse" or row["t"] < row["m"])
    sparse = next(r for r in stages if r["mode"] == "sparse")
    full = next(r for r in stages if r["mode"] == "full")
    assert sparse["k"] < 39 and sparse["keystream_GB"] < full["keystream_GB"]
    assert {(r["secagg"], r["execution"]) for r in rounds} == {("auto", "protocol"), ("auto", "exact_sum"),
                                                               ("full", "protocol")}
    for row in rounds:
        parts = sum(row[f"{stage}_s"] for stage in ("select", "train", "privatize", "secagg", "aggregate", "account"))
        assert abs(parts - row["round_s"]) <= 1e-9 * row["round_s"]
        assert 0 < row["secagg_share"] < 1 and row["graphs"]
