"""The discrete mechanism's calibration (planner/discrete.py; docs/secure-aggregation.md §Discrete noise)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import accounting
from accounting import InvalidInputError
from planner import discrete
from trainer.secagg import discrete as dm

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

CASE: dict[str, Any] = {
    "sampling_rate": 0.02,
    "rounds": 200,
    "epsilon": 2.0,
    "delta": 1e-5,
    "clip_norm": 0.5,
    "dimension": 54_410,
    "min_survivors": 40,
    "max_clients": 300,
}


def test_the_rounding_bounds_are_the_conditional_rounding_formula() -> None:
    c, d = 100.0, 1000
    dp = 1024
    expected = math.sqrt(c * c + dp / 4 + math.sqrt(2 * 2.0) * (c + math.sqrt(dp) / 2))
    assert discrete.rounded_l2_bound(1.0, c, d) == pytest.approx(expected)
    for small in (0.0, 1.0, 5.0):  # never above the bound every floor-or-ceiling rounding meets
        assert discrete.rounded_l2_bound(1.0, small, d) <= small + 32.0
    assert discrete.rounded_l1_bound(3.0, d) == 9.0
    assert discrete.rounded_l1_bound(1e3, d) == pytest.approx(32.0 * 1e3)


def test_the_wrap_probability_bounds_the_observed_wraps() -> None:
    rng = np.random.default_rng(2)
    clip_norm, scale, d, share, n = 1.0, 16.0, 64, 30.0, 10
    params = dm.DiscreteParams.derived(clip_norm, scale, d, share, bits=62)
    for bits in (7, 8, 9):
        bound = discrete.wrap_probability(bits, n, clip_norm, scale, d, share)
        wraps = 0
        runs = 400
        for run in range(runs):
            signs = dm.rotation_signs(run, d)
            direction = rng.normal(size=d)  # every client pushes the same way: the largest sums
            updates = np.tile(direction / np.linalg.norm(direction) * clip_norm, (n, 1))
            sums = dm.decode(dm.modular_sum(dm.client_share(updates, params, signs, rng), 62), 62)
            wraps += bool(np.any((sums < -(2 ** (bits - 1))) | (sums >= 2 ** (bits - 1))))
        assert wraps / runs <= bound + 3 * math.sqrt(bound / runs) + 1e-9, (bits, wraps, bound)
    chosen, chance = discrete.bits_for(1e-6, n, clip_norm, scale, d, share)
    assert chance <= 1e-6 < discrete.wrap_probability(chosen - 1, n, clip_norm, scale, d, share)


def test_calibration_meets_the_budget_tightly_and_states_the_mechanism() -> None:
    plan = discrete.calibrate_skellam(**CASE)
    assert plan.epsilon <= CASE["epsilon"]
    wrap = plan.wrap_probability_run
    assert wrap == pytest.approx(CASE["rounds"] * plan.wrap_probability_per_round) and wrap <= CASE["delta"] / 1000
    recomputed = accounting.epsilon_of_events([plan.event()], delta=CASE["delta"] - wrap)
    assert recomputed.epsilon == plan.epsilon
    # 0.1% less noise misses the target: the search returned (nearly) the least noise.
    less = plan.event().model_copy(update={"variance": plan.total_variance * 0.998})
    assert accounting.epsilon_of_events([less], delta=CASE["delta"] - wrap).epsilon > CASE["epsilon"]
    assert plan.share_variance * plan.honest_survivors == pytest.approx(plan.total_variance)
    assert plan.honest_survivors == 40 and plan.colluding_clients == 0
    assert plan.padded_dimension == 65_536 and plan.gamma == 1 / plan.scale
    assert plan.l2_sensitivity <= plan.clip_norm * plan.scale * math.sqrt(1 + discrete.ROUNDING_INFLATION)
    # the bit width keeps the per-round wrap probability below its bound with the planned shares
    assert (
        discrete.wrap_probability(
            plan.bits, plan.max_clients, plan.clip_norm, plan.scale, plan.dimension, plan.share_variance
        )
        <= plan.wrap_probability_per_round
    )
    assert plan.discretisation_overhead < 0.01  # the target at the default grid
    assert plan.gaussian_epsilon <= plan.epsilon  # the continuous figure is never the larger here
    assert "no client colludes" in plan.threat_model


def test_colluding_clients_raise_each_share_so_the_honest_ones_alone_meet_the_budget() -> None:
    honest = discrete.calibrate_skellam(**CASE)
    colluding = discrete.calibrate_skellam(**CASE, colluding_clients=10)
    assert colluding.honest_survivors == 30
    assert colluding.total_variance == pytest.approx(honest.total_variance)
    assert colluding.share_variance == pytest.approx(honest.share_variance * 40 / 30)
    assert "up to 10 clients collude" in colluding.threat_model


@pytest.mark.parametrize(
    ("field", "value"),
    [("colluding_clients", 40), ("colluding_clients", -1), ("max_clients", 10), ("epsilon", 0.0), ("dimension", 0)],
)
def test_bad_inputs_name_the_field(field: str, value: Any) -> None:
    with pytest.raises(InvalidInputError) as error:
        discrete.calibrate_skellam(**{**CASE, field: value})
    assert error.value.field == field


def test_every_noised_pool_of_a_plan_gets_noise_meeting_every_member_groups_budget() -> None:
    from planner import load_scenario, make_plan

    scenario = load_scenario(
        {
            "groups": [
                {"id": "strict", "epsilon": 1.0, "num_clients": 300},
                {"id": "relaxed", "epsilon": 4.0, "num_clients": 300},
            ],
            "delta": 1e-4,
            "rounds": 50,
            "clip_norm": 1.0,
            "model_dim": 1000,
            "expected_clients": 60,
            "min_clients_per_pool": 1,
        }
    )
    plan = make_plan(scenario)
    pools = discrete.pool_mechanisms(plan, colluding_clients=0)
    targets = {g.id: g.epsilon for g in plan.groups}
    assert {p.pool for p in pools} == {pool.id for pool in plan.pools if pool.noise_multiplier > 0}
    for pool in pools:
        assert pool.group_epsilons[pool.binding_group] == pytest.approx(pool.mechanism.epsilon)
        for group, eps in pool.group_epsilons.items():
            target = targets[group]
            assert target is not None and eps <= target
        stated = next(p for p in plan.pools if p.id == pool.pool)
        assert pool.mechanism.min_survivors == stated.secagg_threshold
    with pytest.raises(InvalidInputError) as error:
        discrete.pool_mechanisms(plan, colluding_clients=-2)
    assert error.value.field == "colluding_clients"


def test_report_discrete_states_each_pools_calibration_and_is_absent_from_plans_that_do_not_ask() -> None:
    import json

    from planner import load_scenario, make_plan
    from planner.report import plan_text

    base = json.loads((EXAMPLES / "scenario.json").read_text())
    plain = make_plan(load_scenario(base))
    dumped = json.loads(plain.model_dump_json())
    assert "report_discrete" not in dumped["scenario"] and "colluding_clients" not in dumped["scenario"]
    assert all("discrete" not in pool for pool in dumped["pools"])
    assert "discrete mechanism" not in plan_text(plain)

    asked = make_plan(load_scenario({**base, "report_discrete": True, "colluding_clients": 0}))
    for pool, before in zip(asked.pools, plain.pools, strict=True):
        assert pool.discrete is not None and pool.discrete.min_survivors == pool.secagg_threshold
        assert pool.discrete.mechanism == "skellam" and pool.discrete.rotation == "randomized_hadamard"
        assert pool.noise_multiplier == before.noise_multiplier  # the executed (continuous) plan is unchanged
    assert [g.epsilon_spent for g in asked.groups] == [g.epsilon_spent for g in plain.groups]
    text = plan_text(asked)
    assert "discrete mechanism (run by gdpfed train --secagg-mechanism skellam" in text and "0 colluding client(s)" in text
    reread = type(asked).model_validate_json(asked.model_dump_json())
    assert reread.pools[0].discrete == asked.pools[0].discrete


def test_a_plan_with_spent_phases_gets_a_warning_instead_of_a_block() -> None:
    """Spent continuous phases that no Skellam events record (a re-plan of a continuous run):
    no block is calibrated on them (docs/planning.md §9)."""
    import json

    from planner import load_scenario, make_plan

    asked = make_plan(load_scenario({**json.loads((EXAMPLES / "scenario.json").read_text()), "report_discrete": True}))
    spent = asked.model_copy(
        update={
            "groups": [g.model_copy(update={"spent_phase_count": 1}) for g in asked.groups],
            "pools": [p.model_copy(update={"discrete": None}) for p in asked.pools],
        }
    )
    with pytest.raises(InvalidInputError) as error:
        discrete.pool_mechanisms(spent)
    assert error.value.field.endswith(".spent_discrete") and "no Skellam events record" in error.value.message
    again = discrete.with_discrete(spent)
    assert all(p.discrete is None for p in again.pools)
    assert any(w.startswith("report_discrete:") and "no discrete block" in w for w in again.warnings)


def test_report_discrete_stops_at_its_time_limit_and_keeps_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from planner import load_scenario, make_plan

    monkeypatch.setattr(discrete, "DISCRETE_REPORT_TIME_LIMIT_S", -1.0)  # already past it before the first pool
    asked = make_plan(load_scenario({**json.loads((EXAMPLES / "scenario.json").read_text()), "report_discrete": True}))
    assert all(p.discrete is None for p in asked.pools)
    assert any(w.startswith("report_discrete: stopped after") for w in asked.warnings)


def test_a_pool_mixing_clip_norms_gets_a_bit_width_covering_its_largest_clip_norm() -> None:
    """b must keep the wrap-around below the charged per-round bound for every client of the pool,
    not only for the binding group's: idp_scale gives the relaxed group a larger clip norm than the
    binding strict group's, so b from the binding clip norm alone wrapped with probability ~3e-4
    per round against the 2e-9 charged to delta."""
    from planner import load_scenario, make_plan

    scenario = load_scenario(
        {
            "groups": [
                {"id": "strict", "epsilon": 1.0, "num_clients": 300},
                {"id": "relaxed", "epsilon": 4.0, "num_clients": 300},
            ],
            "delta": 1e-4,
            "rounds": 50,
            "model_dim": 1000,
            "expected_clients": 60,
            "min_clients_per_pool": 1,
        }
    )
    plan = make_plan(scenario, "idp_scale")
    (pool,) = discrete.pool_mechanisms(plan, colluding_clients=0)
    block = pool.mechanism
    clips = {g.id: g.clip_norm for g in plan.groups}
    assert pool.binding_group == "strict" and block.clip_norm == clips["strict"] < clips["relaxed"]
    for group in plan.groups:
        chance = discrete.wrap_probability(
            block.bits, block.max_clients, group.clip_norm, block.scale, block.dimension, block.share_variance
        )
        assert chance <= block.wrap_probability_per_round, group.id


def test_a_count_coordinate_is_calibrated_into_one_event_with_the_released_sensitivities() -> None:
    """Adaptive clipping's count (docs/secure-aggregation.md §Discrete noise, "Adaptive clipping"):
    the released vector is the rounded update (L2 <= D2, L1 <= D1) and one integer +-m, so the
    event's sensitivities are sqrt(D2^2 + m^2) and D1 + m, met by the calibrated noise."""
    plain = discrete.calibrate_skellam(**CASE)
    m = discrete.count_factor_for(plain.l2_sensitivity, 1.0, 2.0)
    share = 1.0 / 16.0  # z_eff^2 / (2 sigma_b)^2
    assert m == math.ceil(plain.l2_sensitivity * math.sqrt(share / (1 - share)))
    counted = discrete.calibrate_skellam(**CASE, count_factor=m)
    assert counted.count_factor == m and plain.count_factor == 0 and plain.count_noise_std is None
    # the update's rounding bound is the same; the release's sensitivities carry the count
    assert counted.l2_sensitivity == plain.l2_sensitivity and counted.l1_sensitivity == plain.l1_sensitivity
    event = counted.event()
    assert event.l2_sensitivity == math.sqrt(plain.l2_sensitivity**2 + m * m)
    assert event.l1_sensitivity == plain.l1_sensitivity + m
    wrap = counted.wrap_probability_run
    assert counted.epsilon <= CASE["epsilon"]
    assert accounting.epsilon_of_events([event], delta=CASE["delta"] - wrap).epsilon == counted.epsilon
    less = event.model_copy(update={"variance": counted.total_variance * 0.998})
    assert accounting.epsilon_of_events([less], delta=CASE["delta"] - wrap).epsilon > CASE["epsilon"]
    # the update alone would be under-noised: the count's share of the sensitivity costs noise
    assert counted.total_variance > plain.total_variance * 1.05
    assert counted.count_noise_std == pytest.approx(math.sqrt(counted.total_variance) / (2 * m), rel=1e-12)
    # the bit width covers the count coordinate too: each client adds +-m to it
    args = (CASE["max_clients"], CASE["clip_norm"], counted.scale, CASE["dimension"], counted.share_variance)
    assert discrete.wrap_probability(counted.bits, *args, m) <= counted.wrap_probability_per_round
    assert discrete.wrap_probability(counted.bits, *args, m) > discrete.wrap_probability(counted.bits, *args)
    # 10 clients of +-13 leave the count coordinate no room in [-2^7, 2^7)
    assert discrete.wrap_probability(8, 10, 1.0, 1.0, 64, 1.0, 13) == 1.0 > discrete.wrap_probability(8, 10, 1.0, 1.0, 64, 1.0)
    with pytest.raises(InvalidInputError) as error:
        discrete.count_factor_for(plain.l2_sensitivity, 1.0, 0.5)  # sigma_b = z_eff / 2
    assert error.value.field == "adaptive_clip.count_noise_std"
