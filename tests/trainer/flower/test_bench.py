"""The Flower benchmark's split of a round (process start, setup, training, protocol, transport)."""

from __future__ import annotations

import pytest

from bench.flower import step_breakdown


def line(step, start, loaded, begin, end, **extra):
    return {"step": f"train.gdpfed_{step}", "process_start": start, "module_loaded": loaded,
            "handler_start": begin, "handler_end": end, **extra}


def test_step_breakdown_splits_each_step_into_its_parts():
    records = [
        # KEYS: two nodes; process start 2 s and 3 s, setup 1.5 s, training 0.5 s, protocol 0.25 s
        line("keys", 0.0, 2.0, 2.0, 4.25, setup_s=1.5, train_s=0.5),
        line("keys", 0.0, 3.0, 3.0, 5.25, setup_s=1.5, train_s=0.5),
        # SHARES: one node, 1 s to start, 0.5 s of protocol work
        line("shares", 10.0, 11.0, 11.0, 11.5),
        line("hello", 0.0, 1.0, 1.0, 2.0),  # not a protocol step: ignored
    ]
    totals = step_breakdown(records, {"keys": 8.0, "shares": 4.0, "masked": 0.0, "unmask": 0.0})
    assert totals["process_start_s"] == pytest.approx(2.5 + 1.0)
    assert totals["setup_s"] == pytest.approx(1.5) and totals["train_s"] == pytest.approx(0.5)
    assert totals["protocol_s"] == pytest.approx(0.25 + 0.5)
    # transport: the step's wall time less its slowest process (8 - 5.25, 4 - 1.5)
    assert totals["transport_s"] == pytest.approx(2.75 + 2.5)
