"""Shared helpers for the planner tests: scenarios and an independent accountant."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest

from planner.schema import Plan, Scenario

# The order grid of accounting's rdp (dp-accounting's own grid plus 11 and 1024), so the
# independent check measures the same quantity with a different implementation.
ORDERS = [1 + x / 10 for x in range(1, 100)] + list(range(11, 64)) + [128, 256, 512, 1024]


def worked_scenario(min_clients_per_pool: int = 1, **overrides: Any) -> Scenario:
    """docs/planning.md 'Why pools matter': 3 groups x 100 clients, eps 1, 2, 4, under rdp as
    the page computes it (the default accountant is pld since issue 26), on the continuous path
    (named: the tests that use it are about the design, not the pools' mechanism, and the rdp
    route's discrete blocks cost about 0.45 s a plan; tests/planner/test_discrete.py covers them)."""
    data: dict[str, Any] = dict(
        accountant="rdp",
        secagg_mechanism="gaussian_continuous",
        groups=[{"id": f"g{e}", "epsilon": e, "num_clients": 100} for e in (1, 2, 4)],
        delta=1e-3,
        rounds=100,
        clip_norm=1.0,
        model_dim=100_000,
        expected_clients=30,
        min_clients_per_pool=min_clients_per_pool,
    )
    data.update(overrides)
    return Scenario.model_validate(data)


def random_scenario(seed: int, **overrides: Any) -> Scenario:
    """A seeded random scenario that every method can plan (K within the population), on the
    continuous path (named, as ``worked_scenario``: a Skellam table per pool, up to 0.5 s at
    these model sizes, is not what the tests that use it check)."""
    rng = np.random.default_rng(seed)
    n_groups = int(rng.integers(1, 5))
    groups = []
    for i in range(n_groups):
        opted_out = n_groups > 1 and rng.uniform() < 0.15
        groups.append(
            {
                "id": f"g{i}",
                "epsilon": None if opted_out else float(np.round(rng.uniform(0.5, 8.0), 3)),
                "num_clients": int(rng.integers(60, 3000)),
                "keep_ratio": "auto" if rng.uniform() < 0.3 else None,
            }
        )
    total = sum(g["num_clients"] for g in groups)
    m = int(rng.integers(1, 11))
    private = sum(1 for g in groups if g["epsilon"] is not None)
    k = float(np.round(max(m * (private + 1) * 1.5, rng.uniform(0.02, 0.25) * total), 2))
    data: dict[str, Any] = dict(
        groups=groups,
        delta=float(rng.choice([1e-3, 1e-4, 1e-5])),
        rounds=int(rng.integers(20, 400)),
        clip_norm=1.0,
        model_dim=int(rng.integers(1_000, 1_000_000)),
        expected_clients=min(k, 0.9 * total),
        min_clients_per_pool=m,
        keep_ratio=float(rng.choice([1.0, 0.5])) if rng.uniform() < 0.5 else "auto",
        dropout_rate=float(rng.choice([0.0, 0.1])),
        secagg_mechanism="gaussian_continuous",
    )
    data.update(overrides)
    return Scenario.model_validate(data)


# dp-accounting's PLD grid for the independent check of pld plans (its pessimistic,
# connect-the-dots estimate: an upper bound, within about this much of the exact epsilon).
PLD_INTERVAL = 1e-4


def independent_epsilon(phases: list, delta: float, accountant: str = "rdp") -> float:
    """epsilon of a phase list with Google's dp-accounting: its RdpAccountant (same orders) for
    an rdp (or closed_form) plan, its pessimistic PLD on a 1e-4 grid for a pld plan (the
    default since issue 26), so each plan is checked against an independent implementation
    of its own accountant."""
    dp_accounting = pytest.importorskip("dp_accounting")
    logging.getLogger("absl").setLevel(logging.ERROR)
    if accountant == "pld":
        from dp_accounting.pld import privacy_loss_distribution as pld_lib

        composed = None
        for phase in phases:
            one = pld_lib.from_gaussian_mechanism(
                phase.noise_multiplier, sampling_prob=phase.sampling_rate, pessimistic_estimate=True,
                value_discretization_interval=PLD_INTERVAL, use_connect_dots=True,
            ).self_compose(phase.steps)
            composed = one if composed is None else composed.compose(one)
        assert composed is not None
        return float(composed.get_epsilon_for_delta(delta))
    accountant = dp_accounting.rdp.RdpAccountant(ORDERS)
    for phase in phases:
        event = dp_accounting.PoissonSampledDpEvent(
            phase.sampling_rate, dp_accounting.GaussianDpEvent(phase.noise_multiplier)
        )
        accountant.compose(event, phase.steps)
    return float(accountant.get_epsilon(delta))


def assert_plan_constraints(plan: Plan, *, optimised: bool) -> None:
    """sum q N = K, bounds, private-pool minimum (optimised methods), pools consistent."""
    s = plan.scenario
    k = s.participation
    total = sum(g.sampling_rate * g.num_clients for g in plan.groups)
    assert total == pytest.approx(k, rel=1e-9)
    for g, spec in zip(plan.groups, s.groups):
        assert 0.0 <= g.sampling_rate <= 1.0
        if g.status == "active":
            assert g.sampling_rate >= spec.min_sampling_rate * (1 - 1e-12)
        assert g.expected_clients == pytest.approx(g.sampling_rate * g.num_clients, rel=1e-12)
    ids = [gid for pool in plan.pools for gid in pool.groups]
    assert sorted(ids) == sorted(g.id for g in plan.groups)
    by_id = {g.id: g for g in plan.groups}
    for pool in plan.pools:
        members = [by_id[i] for i in pool.groups]
        private = any(m.epsilon is not None for m in members)
        if optimised and private and any(m.sampling_rate > 0 for m in members):
            assert pool.expected_clients >= s.min_clients_per_pool * (1 - 1e-9)
        required = [m.noise_multiplier_required * m.clip_norm for m in members if m.noise_multiplier_required]
        if required:
            assert pool.noise_std == pytest.approx(max(required), rel=1e-12) or plan.method == "idp_scale"
        assert pool.noise_share_std == pytest.approx(pool.noise_std / pool.secagg_threshold**0.5, rel=1e-12)
