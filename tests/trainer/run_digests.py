"""Golden digests of fixed-seed runs (issue 28): what a run writes, hashed, so that moving
the trainer's code can be shown to change nothing it computes.

A run's digest is three sha256s:

- ``rounds``: ``rounds.jsonl`` with each line's ``seconds`` and ``timing`` left out (wall
  clock; everything else, epsilons, counts, metrics, secure-aggregation graphs, stays);
- ``summary``: ``summary.json`` without ``seconds`` (wall clock) and ``run_dir`` (the test's
  temporary directory); ``secagg_workers`` is pinned to 1 by the scenarios (under ``auto``
  the summary would name the host's core count);
- ``params``: the final checkpoint's global parameters and the strategy's state (every
  tensor's dtype, shape and bytes, every other value's repr, in the checkpoint's order)
  and the ledger's state.

Every scenario pins ``accountant: rdp`` and ``secagg_mechanism: gaussian_continuous`` (a default
accountant or mechanism that changes must not move these digests). Shared by ``tests/trainer/test_run_digests.py`` and the Flower pass's
``tests/trainer/flower/test_flower_digests.py``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from planner.schema import Plan
from tests.trainer.trainer_plans import hand_plan


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """torch's thread count changes the order of float reductions, so a fixed-seed run's
    bits depend on it (silo/ifca_mrmtl differed between 2 threads and 1, which an earlier test
    in a whole-suite run had set): the digests are recorded and checked on one thread, the
    same on any machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)

ROUNDS = 3
WALL_CLOCK_ROUND_FIELDS = ("seconds", "timing")
NONDETERMINISTIC_SUMMARY_FIELDS = ("seconds", "run_dir")


def rdp(plan: Plan) -> Plan:
    """``plan`` with ``accountant: rdp`` in its scenario as in the plan (``hand_plan`` pins the plan's),
    and the continuous Gaussian named as its pools' noise (the hand-made plans state no discrete
    blocks; a default mechanism that changes must not move these digests either)."""
    scenario = plan.scenario.model_copy(update={"accountant": "rdp", "secagg_mechanism": "gaussian_continuous"})
    return plan.model_copy(update={"scenario": scenario, "accountant": "rdp"})


def client_plan() -> Plan:
    """Two groups in two pools, 10% planned dropout (the protocol's recovery runs)."""
    return rdp(hand_plan(
        [("strict", 1.0, 12, 0.5), ("loose", 4.0, 12, 0.6)],
        [("p_strict", ["strict"], 1.2, 3, 0.3), ("p_loose", ["loose"], 0.4, 3, 1.0)],
        rounds=ROUNDS, model_dim=1210, dropout_rate=0.1,
    ))


def discrete_client_plan() -> Plan:
    """``client_plan`` stating each noised pool's distributed Skellam block, as the planner's
    default plans do: ``gdpfed train``'s default (``--secagg-mechanism plan``) runs skellam on it."""
    from planner.finalize import with_discrete

    plan = client_plan()
    asked = plan.model_copy(update={"scenario": plan.scenario.model_copy(update={"report_discrete": True})})
    stated = with_discrete(asked)
    assert all(pool.discrete is not None for pool in stated.pools), stated.warnings
    return stated


def opted_out_plan() -> Plan:
    """A private group and an opted-out one (FedHDP's setting)."""
    return rdp(hand_plan(
        [("private", 3.0, 18, 0.5), ("out", None, 6, 0.5)],
        [("P1", ["private"], 1.0, 2, 1.0), ("P2", ["out"], 0.0, 1, 1.0)],
        rounds=ROUNDS, model_dim=1210, method="gdpfed",
    ))


def with_adaptive_clip(plan: Plan, **settings: float) -> Plan:
    """``plan`` with an ``adaptive_clip`` block and the pools' sigma_Delta and sigma_b it implies."""
    from planner.adaptive_clip import adaptive_pools
    from planner.schema import AdaptiveClip

    scenario = plan.scenario.model_copy(update={"adaptive_clip": AdaptiveClip(**settings)})
    pools = adaptive_pools(scenario, plan.pools, {g.id: g.clip_norm for g in plan.groups})
    return plan.model_copy(update={"scenario": scenario, "pools": pools})


def _feed(digest: Any, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu().contiguous()
        digest.update(f"tensor {tensor.dtype} {tuple(tensor.shape)}".encode())
        digest.update(tensor.numpy().tobytes() if tensor.dtype != torch.bfloat16 else tensor.float().numpy().tobytes())
    elif isinstance(value, np.ndarray):
        digest.update(f"array {value.dtype} {value.shape}".encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, dict):
        digest.update(b"{")
        for key, item in value.items():
            digest.update(repr(key).encode())
            _feed(digest, item)
        digest.update(b"}")
    elif isinstance(value, (list, tuple)):
        digest.update(b"[")
        for item in value:
            _feed(digest, item)
        digest.update(b"]")
    else:
        digest.update(repr(value).encode())


def run_digest(run_dir: Path) -> dict[str, str]:
    """The three sha256s of the finished run in ``run_dir`` (the module docstring)."""
    lines = [json.loads(line) for line in (run_dir / "rounds.jsonl").read_text().splitlines() if line.strip()]
    rounds = [{k: v for k, v in line.items() if k not in WALL_CLOCK_ROUND_FIELDS} for line in lines]
    summary = json.loads((run_dir / "summary.json").read_text())
    for name in NONDETERMINISTIC_SUMMARY_FIELDS:
        summary.pop(name, None)
    state = torch.load(run_dir / "checkpoint.pt", map_location="cpu", weights_only=False)
    params = hashlib.sha256()
    for name in ("global_params", "strategy", "ledger"):
        params.update(name.encode())
        _feed(params, state[name])
    return {
        "rounds": hashlib.sha256(json.dumps(rounds, sort_keys=True).encode()).hexdigest(),
        "summary": hashlib.sha256(json.dumps(summary, sort_keys=True).encode()).hexdigest(),
        "params": params.hexdigest(),
    }
