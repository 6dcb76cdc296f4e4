"""Adaptive clipping in the plan (docs/planning.md §15): z_eff, sigma_Delta, the ledger."""

from __future__ import annotations

import json
import math

import dp_accounting
import numpy as np
import pytest

from accounting.errors import InvalidInputError
from app.cli import run
from planner import ledger as plan_ledger
from planner.adaptive_clip import effective_noise_multiplier, update_noise_multiplier
from planner.plan import make_plan
from planner.schema import Scenario
from planner.units import load_plan
from planner.verify import verify_executable

SCENARIO = {
    "groups": [
        {"id": "strict", "epsilon": 1.0, "num_clients": 400},
        {"id": "relaxed", "epsilon": 4.0, "num_clients": 400},
        {"id": "out", "epsilon": None, "num_clients": 40},
    ],
    "delta": 1e-4,
    "rounds": 60,
    "model_dim": 1000,
    "expected_clients": 80,
}


def _plan(block: dict | None, method: str = "gdpfed"):
    data = dict(SCENARIO) | ({"adaptive_clip": block} if block is not None else {})
    return make_plan(Scenario.model_validate(data), method, clients_needed=False)


def test_z_eff_round_trips_and_sigma_b_to_infinity_is_fixed_clipping() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        z = float(rng.uniform(0.05, 20))
        sigma_b = z / 2 * float(rng.uniform(1.001, 50))
        sigma_delta = update_noise_multiplier(z, sigma_b)
        assert sigma_delta > z
        assert effective_noise_multiplier(sigma_delta, sigma_b) == pytest.approx(z, rel=1e-12)
    # the count's cost vanishes as its noise grows: sigma_Delta -> z_eff
    assert update_noise_multiplier(1.5, 1e8) == pytest.approx(1.5, rel=1e-15)
    assert update_noise_multiplier(0.0, 3.0) == 0.0
    with pytest.raises(InvalidInputError) as caught:
        update_noise_multiplier(3.0, 1.5)  # sigma_b = z_eff / 2: the count alone spends the budget
    assert caught.value.field == "adaptive_clip.count_noise_std"


def test_the_released_pair_is_never_less_noisy_than_the_z_eff_the_ledger_composes() -> None:
    """The ledger charges z_eff (the pool's noise multiplier); the clients run sigma_Delta and
    sigma_b. Their composition must be >= z_eff exactly, not within rounding: before, about one
    pair in ten came back an ulp below (an optimistic ledger by that ulp)."""
    rng = np.random.default_rng(0)
    for _ in range(2000):
        z = float(rng.uniform(0.3, 5))
        sigma_b = z / 2 * float(rng.uniform(1.01, 50))
        sigma_delta = update_noise_multiplier(z, sigma_b)
        assert effective_noise_multiplier(sigma_delta, sigma_b) >= z, (z, sigma_b)
        assert sigma_delta == pytest.approx((z**-2 - (2 * sigma_b) ** -2) ** -0.5, rel=1e-15)


@pytest.mark.parametrize(("q", "z", "sigma_b"), [(1.0, 1.5, 2.0), (1.0, 4.0, 2.5), (1.0, 0.7, 10.0)])
def test_z_eff_is_the_composition_of_the_two_gaussians_by_dp_accounting(q: float, z: float, sigma_b: float) -> None:
    """Independent check: Google dp-accounting composes the update's Gaussian (multiplier
    sigma_Delta) with the count's (sensitivity 1/2, std sigma_b: multiplier 2 sigma_b) into the
    same epsilon as one Gaussian of multiplier z_eff."""
    sigma_delta = update_noise_multiplier(z, sigma_b)

    def epsilon(event: dp_accounting.DpEvent) -> float:
        accountant = dp_accounting.rdp.RdpAccountant()
        accountant.compose(event, 50)
        return float(accountant.get_epsilon(1e-5))

    both = dp_accounting.ComposedDpEvent(
        [dp_accounting.GaussianDpEvent(sigma_delta), dp_accounting.GaussianDpEvent(2 * sigma_b)]
    )
    assert epsilon(both) == pytest.approx(epsilon(dp_accounting.GaussianDpEvent(z)), rel=1e-9)


def test_plan_states_sigma_delta_and_the_ledger_is_unchanged() -> None:
    fixed = _plan(None)
    adaptive = _plan({"target_quantile": 0.5, "learning_rate": 0.2})
    for pool, same in zip(adaptive.pools, fixed.pools):
        # z_eff is the multiplier the accountant uses, the same as without adaptive clipping
        assert pool.noise_multiplier == same.noise_multiplier and pool.noise_std == same.noise_std
        assert same.update_noise_multiplier is None and same.count_noise_std is None
        if pool.noise_multiplier > 0:
            assert pool.count_noise_std == pytest.approx(0.05 * 80)  # default sigma_b = 0.05 K
            expected = (pool.noise_multiplier**-2 - (2 * pool.count_noise_std) ** -2) ** -0.5
            assert pool.update_noise_multiplier == pytest.approx(expected, rel=1e-12)
            assert pool.update_noise_multiplier > pool.noise_multiplier
        else:
            assert (pool.update_noise_multiplier, pool.count_noise_std) == (0.0, 0.0)
    verify_executable(adaptive)
    spent = plan_ledger.spent_by_group(adaptive, adaptive.rounds)  # the continuous mechanism's phases
    assert spent == plan_ledger.spent_by_group(fixed, fixed.rounds)
    # the plan states its own mechanism's ledger (skellam, the default: the blocks' events, the
    # count coordinate included; docs/ledger.md §3)
    stated = plan_ledger.spent_by_group(adaptive, adaptive.rounds, mechanism=adaptive.scenario.mechanism)
    for group in adaptive.groups:
        assert stated[group.id] == (None if group.epsilon is None else pytest.approx(group.epsilon_spent, rel=1e-9))
        if group.epsilon is not None:
            assert spent[group.id] <= group.epsilon * (1 + 1e-9)
            assert stated[group.id] <= group.epsilon * (1 + 1e-9)
    # the update's noise is larger, so the predicted noise-to-signal ratio is too
    assert adaptive.predicted.noise_to_signal > fixed.predicted.noise_to_signal


def test_verify_rederives_sigma_delta_and_sigma_b() -> None:
    plan = _plan({"count_noise_std": 6.0})
    assert plan.pools[0].count_noise_std == 6.0
    document = plan.model_dump(mode="json")
    document["pools"][0]["update_noise_multiplier"] *= 0.99  # under-noises the update: z > z_eff claimed
    with pytest.raises(InvalidInputError) as caught:
        verify_executable(load_plan(document))
    assert caught.value.field == "pools.P1.update_noise_multiplier"
    document = plan.model_dump(mode="json")
    document["pools"][0]["count_noise_std"] = 3.0
    with pytest.raises(InvalidInputError) as caught:
        verify_executable(load_plan(document))
    assert caught.value.field == "pools.P1.count_noise_std"
    document = plan.model_dump(mode="json")
    document["scenario"]["adaptive_clip"]["count_noise_std"] = 1.0  # <= z_eff / 2 of the strict pool
    with pytest.raises(InvalidInputError) as caught:
        verify_executable(load_plan(document))
    assert caught.value.field == "adaptive_clip.count_noise_std"


def test_sigma_b_at_most_half_z_eff_is_refused_and_compare_marks_the_method() -> None:
    with pytest.raises(InvalidInputError) as caught:
        _plan({"count_noise_std": 1.0})
    assert caught.value.field == "adaptive_clip.count_noise_std" and "z_eff / 2" in caught.value.reason
    compared = _plan({"count_noise_std": 1.0}, method="compare")
    rows = {row.method: row for row in compared.comparison or []}
    assert not rows["gdpfed"].feasible and "adaptive_clip.count_noise_std" in (rows["gdpfed"].error or "")
    assert not rows["idp_scale"].feasible and "per-group clip norms" in (rows["idp_scale"].error or "")
    assert compared.scenario.adaptive_clip is not None and compared.pools[0].update_noise_multiplier is not None


@pytest.mark.parametrize(
    ("block", "field"),
    [
        ({"target_quantile": 1.5}, "adaptive_clip.target_quantile"),
        ({"learning_rate": -0.1}, "adaptive_clip.learning_rate"),
        ({"initial_clip_norm": 0}, "adaptive_clip.initial_clip_norm"),
        ({"count_noise_std": 1.0}, "adaptive_clip.count_noise_std"),
        ({"eta": 0.2}, "adaptive_clip.eta"),
    ],
)
def test_a_bad_block_exits_2_naming_the_field(block: dict, field: str, tmp_path, capsys) -> None:
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(SCENARIO | {"adaptive_clip": block}))
    assert run(["plan", str(path), "--method", "gdpfed"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0], err


def test_per_group_clip_norms_are_refused() -> None:
    data = json.loads(json.dumps(SCENARIO)) | {"adaptive_clip": {}}
    data["groups"][0]["clip_norm"] = 0.5
    with pytest.raises(InvalidInputError) as caught:
        make_plan(Scenario.model_validate(data), "gdpfed", clients_needed=False)
    assert caught.value.field == "adaptive_clip" and "'strict'" in caught.value.reason
    assert math.isfinite(_plan({}).pools[0].update_noise_multiplier or math.nan)
