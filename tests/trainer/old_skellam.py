"""The 99ba0bd skellam plan and its interrupted run (fixtures written by that release), and the
counter of their full-run Skellam ledgers' compositions: shared by the simulator's count tests
(tests/trainer/test_cli.py) and the Flower ServerApp's (tests/trainer/flower/test_discrete.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

# `gdpfed plan examples/scenario.json` at 99ba0bd, the release before the plans stated their
# Skellam figures: blocks, and each group's figures the continuous Gaussian's, up to ~1e-7
# relative below what the blocks spend (docs/ledger.md §5)
OLD_SKELLAM_PLAN = Path(__file__).resolve().parents[1] / "planner" / "data" / "plan-skellam-gaussian-figures.json"
# `gdpfed train --plan` of that plan (TINY, --rounds 3) at 99ba0bd, interrupted after round 1
OLD_SKELLAM_RUN = Path(__file__).resolve().parent / "old_runs" / "run-99ba0bd-skellam"


def full_run_ledgers(monkeypatch: pytest.MonkeyPatch, plan_path: Path) -> dict[str, int]:
    """group id -> how often its full-run Skellam ledger (the events of the plan's rounds on skellam)
    is composed from here on: ``planner.ledger.default_epsilon_fn`` counted."""
    from planner import ledger as plan_ledger
    from planner.calibration import history_key
    from planner.units import load_plan
    from trainer.units.client.discrete import discrete_pools

    plan = load_plan(json.loads(plan_path.read_text()))
    # the blocks are an earlier calibration's: the trainer checks them at their own noise
    assert any(pool.own_noise for pool in discrete_pools(plan, plan.scenario.model_dim).values())
    full_run = {
        history_key(plan_ledger.run_history(plan, g, plan.rounds, "skellam")): g.id
        for g in plan.groups if g.epsilon is not None and g.sampling_rate > 0
    }
    counts = dict.fromkeys(full_run.values(), 0)
    compose = plan_ledger.default_epsilon_fn

    def counted(events: Any, delta: float, accountant: Any) -> float:
        group = full_run.get(history_key(events))
        if group is not None:
            counts[group] += 1
        return compose(events, delta, accountant)

    monkeypatch.setattr(plan_ledger, "default_epsilon_fn", counted)
    return counts
