"""The discrete mechanism's calibration (planner/discrete.py; docs/secure-aggregation.md §Discrete noise)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

import accounting
from accounting import InvalidInputError
from accounting.accountants import AccountantName
from accounting.errors import validation_error_line
from planner import discrete
from planner.finalize import with_discrete
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
    assert plan.accountant == "pld" and plan.epsilon <= CASE["epsilon"]
    wrap = plan.wrap_probability_run
    assert wrap == pytest.approx(CASE["rounds"] * plan.wrap_probability_per_round) and wrap <= CASE["delta"] / 1000
    # the figure of record: pld's epsilon of the event the ledger counts, at delta less the wraps
    recomputed = accounting.epsilon_of_events([plan.event()], delta=CASE["delta"] - wrap, accountant="pld")
    assert not recomputed.fallback and recomputed.epsilon == plan.epsilon
    # 0.4% less variance (0.2% less noise std) misses the target: the least noise, to pld's calibration tolerance
    less = plan.event().model_copy(update={"variance": plan.total_variance * 0.996})
    assert accounting.epsilon_of_events([less], delta=CASE["delta"] - wrap, accountant="pld").epsilon > CASE["epsilon"]
    assert plan.share_variance * plan.honest_survivors == plan.total_variance
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
    # the target at the default grid: under 1% over the continuous Gaussian of equal noise
    assert 0 <= plan.discretisation_overhead < 0.01 and 0 <= plan.overhead_vs_continuous < 0.01
    assert plan.gaussian_epsilon <= plan.gaussian_epsilon_same_bound <= plan.epsilon
    gaussian = accounting.PoissonSampledGaussian(
        sampling_rate=CASE["sampling_rate"], noise_multiplier=plan.equivalent_noise_multiplier, steps=CASE["rounds"]
    )
    assert accounting.epsilon_of_events([gaussian], delta=CASE["delta"], accountant="pld").epsilon == plan.gaussian_epsilon
    assert "no client colludes" in plan.threat_model


# calibrate_skellam(**CASE) by the rdp route, as the code computed it before the tight route
# existed (fe01b0e, when rdp calibrated every block): rdp plans must reproduce their blocks.
RDP_PINNED = {
    "total_variance": 22023379.2947752,
    "share_variance": 550584.48236938,
    "equivalent_noise_multiplier": 1.1457293308712877,
    "bits": 19,
    "epsilon": 1.9998624146043475,
    "gaussian_epsilon_same_bound": 1.9966536011440965,
    "gaussian_epsilon": 1.6319947047964254,
    "l2_sensitivity": 4099.030129189099,
    "scale": 8192.0,
}


def test_the_rdp_route_reproduces_the_blocks_rdp_calibrated_before() -> None:
    plan = discrete.calibrate_skellam(**CASE, accountant="rdp")
    assert plan.accountant == "rdp"
    assert {name: getattr(plan, name) for name in RDP_PINNED} == RDP_PINNED
    # prv and closed_form cannot account the Skellam event: their plans calibrate by rdp too
    names: tuple[AccountantName, ...] = ("pld", "rdp", "prv", "closed_form")
    assert [discrete.calibration_accountant(a) for a in names] == ["pld", "rdp", "rdp", "rdp"]
    with pytest.raises(InvalidInputError) as error:
        discrete.calibrate_skellam(**CASE, accountant="tight")  # type: ignore[arg-type]
    assert error.value.field == "accountant"


def test_the_tight_calibration_is_within_one_percent_of_the_continuous_gaussian_on_the_example() -> None:
    """The rdp route's blocks of examples/scenario.json were 23-170% above the continuous
    Gaussian (pld) at equal noise; the tight route's are under 1%, and every pool's noise is
    within 0.5% of the continuous plan's (the grid's rounding bound D2 / (C s) and pld's
    calibration tolerance; the rdp route's was 1.2-2.4 times it)."""
    import json

    from planner import load_scenario, make_plan

    plan = make_plan(load_scenario(json.loads((EXAMPLES / "scenario.json").read_text())))
    noised = [pool for pool in plan.pools if pool.noise_multiplier > 0]
    assert noised and all(pool.discrete is not None for pool in noised)
    for pool in noised:
        block = pool.discrete
        assert block is not None and block.accountant == "pld"
        assert 0 <= block.overhead_vs_continuous < 0.01, pool.id
        assert 1.0 <= block.equivalent_noise_multiplier / pool.noise_multiplier < 1.005, pool.id


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


def test_skellam_is_the_default_and_gaussian_continuous_names_the_old_path() -> None:
    import json

    from planner import load_scenario, make_plan
    from planner.report import plan_text

    base = json.loads((EXAMPLES / "scenario.json").read_text())
    plain = make_plan(load_scenario({**base, "secagg_mechanism": "gaussian_continuous"}))
    dumped = json.loads(plain.model_dump_json())
    assert dumped["scenario"]["secagg_mechanism"] == "gaussian_continuous"  # every plan states its mechanism
    assert "report_discrete" not in dumped["scenario"] and "colluding_clients" not in dumped["scenario"]
    assert all("discrete" not in pool for pool in dumped["pools"])
    assert "secure aggregation noise: continuous Gaussian (approximate" in plan_text(plain)

    default = make_plan(load_scenario(base))
    assert default.scenario.secagg_mechanism == "skellam"
    assert json.loads(default.model_dump_json())["scenario"]["secagg_mechanism"] == "skellam"
    for pool, before in zip(default.pools, plain.pools, strict=True):
        assert pool.discrete is not None and pool.discrete.min_survivors == pool.secagg_threshold
        assert pool.discrete.mechanism == "skellam" and pool.discrete.rotation == "randomized_hadamard"
        assert pool.noise_multiplier == before.noise_multiplier  # the continuous comparison plan is unchanged
    # each plan states the figures of the mechanism it runs (docs/ledger.md §3, "What a plan states")
    from planner import ledger as plan_ledger

    for plan, mechanism in ((default, "skellam"), (plain, "gaussian_continuous")):
        assert {g.id: g.epsilon_spent for g in plan.groups} == plan_ledger.spent_by_group(
            plan, plan.rounds, mechanism=mechanism  # type: ignore[arg-type]
        )
    text = plan_text(default)
    assert "secure aggregation noise: distributed Skellam (exact" in text and "0 colluding client(s)" in text
    reread = type(default).model_validate_json(default.model_dump_json())
    assert reread.scenario.secagg_mechanism == "skellam" and reread.pools[0].discrete == default.pools[0].discrete
    # what the trainer re-derives before a run is what the plan states
    assert {p.pool: p.mechanism for p in discrete.pool_mechanisms(default)} == {
        pool.id: pool.discrete for pool in default.pools if pool.discrete is not None
    }

    # report_discrete: true is the old spelling of skellam; false no longer selects the continuous path
    old_spelling = make_plan(load_scenario({**base, "report_discrete": True}))
    assert [p.discrete for p in old_spelling.pools] == [p.discrete for p in default.pools]
    not_off = make_plan(load_scenario({**base, "report_discrete": False}))
    assert all(p.discrete is not None for p in not_off.pools)
    assert any(w.startswith("report_discrete: false no longer selects") for w in not_off.warnings)
    for bad, field in (
        ({"report_discrete": True, "secagg_mechanism": "gaussian_continuous"}, "report_discrete"),
        ({"secagg_mechanism": "discrete_gaussian"}, "secagg_mechanism"),
    ):
        with pytest.raises(ValidationError) as refused:
            load_scenario({**base, **bad})
        assert validation_error_line(refused.value.errors())[0] == field


def test_a_plan_with_spent_phases_gets_a_warning_instead_of_a_block() -> None:
    """Spent continuous phases that no Skellam events record (a re-plan of a continuous run):
    no block is calibrated on them (docs/planning.md §9)."""
    import json

    from planner import load_scenario, make_plan

    asked = make_plan(load_scenario(json.loads((EXAMPLES / "scenario.json").read_text())))
    spent = asked.model_copy(
        update={
            "groups": [g.model_copy(update={"spent_phase_count": 1}) for g in asked.groups],
            "pools": [p.model_copy(update={"discrete": None}) for p in asked.pools],
        }
    )
    with pytest.raises(InvalidInputError) as error:
        discrete.pool_mechanisms(spent)
    assert error.value.field.endswith(".spent_discrete") and "no Skellam events record" in error.value.message
    again = with_discrete(spent)
    assert all(p.discrete is None for p in again.pools)
    assert any(w.startswith("secagg_mechanism skellam:") and "no discrete block" in w for w in again.warnings)


def test_the_discrete_calibration_stops_at_its_time_limit_and_keeps_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from planner import load_scenario, make_plan

    monkeypatch.setattr(discrete, "DISCRETE_REPORT_TIME_LIMIT_S", -1.0)  # already past it before the first pool
    asked = make_plan(load_scenario(json.loads((EXAMPLES / "scenario.json").read_text())))
    assert all(p.discrete is None for p in asked.pools)
    assert any(w.startswith("secagg_mechanism skellam: stopped") for w in asked.warnings)


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


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_a_count_coordinate_is_calibrated_into_one_event_with_the_released_sensitivities(accountant: str) -> None:
    """Adaptive clipping's count (docs/secure-aggregation.md §Discrete noise, "Adaptive clipping"):
    the released vector is the rounded update (L2 <= D2, L1 <= D1) and one integer +-m, so the
    event's sensitivities are sqrt(D2^2 + m^2) and D1 + m, met by the calibrated noise, by the
    tight route (pld) and the rdp route alike, each certified by its own accountant."""
    plain = discrete.calibrate_skellam(**CASE, accountant=accountant)  # type: ignore[arg-type]
    m = discrete.count_factor_for(plain.l2_sensitivity, 1.0, 2.0)
    share = 1.0 / 16.0  # z_eff^2 / (2 sigma_b)^2
    assert m == math.ceil(plain.l2_sensitivity * math.sqrt(share / (1 - share)))
    counted = discrete.calibrate_skellam(**CASE, count_factor=m, accountant=accountant)  # type: ignore[arg-type]
    assert counted.accountant == accountant
    assert counted.count_factor == m and plain.count_factor == 0 and plain.count_noise_std is None
    # the update's rounding bound is the same; the release's sensitivities carry the count
    assert counted.l2_sensitivity == plain.l2_sensitivity and counted.l1_sensitivity == plain.l1_sensitivity
    event = counted.event()
    assert event.l2_sensitivity == math.sqrt(plain.l2_sensitivity**2 + m * m)
    assert event.l1_sensitivity == plain.l1_sensitivity + m
    wrap = counted.wrap_probability_run
    assert counted.epsilon <= CASE["epsilon"]
    assert accounting.epsilon_of_events([event], delta=CASE["delta"] - wrap, accountant=accountant).epsilon == counted.epsilon  # type: ignore[arg-type]
    less = event.model_copy(update={"variance": counted.total_variance * 0.998})
    assert accounting.epsilon_of_events([less], delta=CASE["delta"] - wrap, accountant=accountant).epsilon > CASE["epsilon"]  # type: ignore[arg-type]
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


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_a_replanned_counted_block_is_calibrated_on_its_spent_events_by_its_route(accountant: str) -> None:
    """Both sides of the calibration at once (docs/secure-aggregation.md §Discrete noise,
    "Calibration"): a re-plan's group that spent Skellam events, under adaptive clipping's count
    coordinate. The block's epsilon is its accountant's figure of exactly the events the ledger
    composes (the spent ones, then the new rounds with the released sensitivities) at delta less
    both wrap charges; 0.2% less noise misses the budget; the overheads compare the new rounds alone."""
    m = 300
    first = discrete.calibrate_skellam(**{**CASE, "epsilon": 1.0}, count_factor=m, accountant=accountant)  # type: ignore[arg-type]
    spent, spent_wrap = [first.event(120)], 120 * first.wrap_probability_per_round
    block = discrete.calibrate_skellam(
        **CASE, count_factor=m, spent=spent, spent_wrap=spent_wrap, accountant=accountant,  # type: ignore[arg-type]
    )
    assert block.accountant == accountant and block.count_factor == m
    delta = CASE["delta"] - spent_wrap - block.wrap_probability_run
    event = block.event()
    assert event.l2_sensitivity == math.sqrt(block.l2_sensitivity**2 + m * m)

    def composed(events: list[Any]) -> float:
        return accounting.epsilon_of_events(events, delta=delta, accountant=accountant).epsilon  # type: ignore[arg-type]

    assert block.epsilon == composed([*spent, event]) <= CASE["epsilon"]
    less = event.model_copy(update={"variance": block.total_variance * 0.998})
    assert composed([*spent, less]) > CASE["epsilon"]
    # the spent events cost noise: the same budget without them needs less
    fresh = discrete.calibrate_skellam(**CASE, count_factor=m, accountant=accountant)  # type: ignore[arg-type]
    assert block.total_variance > fresh.total_variance * 1.01
    own = composed([event])
    assert own < block.epsilon
    assert block.overhead_vs_continuous == pytest.approx(own / block.gaussian_epsilon - 1.0, rel=1e-12)


def test_the_blocks_recalibration_starts_from_the_plans_continuous_answers(
        sound_epsilons_calls: list[tuple[int, float]]) -> None:
    """pld's re-calibration at delta - T w (docs/accounting.md §13.5) starts each group's search
    from the noise multiplier the plan states for it: one lockstep round of two evaluations per
    group proves every answer; a plan stating none (a hand-written one) gets the same blocks, bit
    for bit, from the searches' own guesses, in more rounds."""
    from planner.loading import load_scenario
    from planner.plan import make_plan

    plan = make_plan(load_scenario(EXAMPLES / "scenario.json"), "gdpfed_plus")
    noised = [g for g in plan.groups if g.noise_multiplier_required]
    assert len(noised) == 3
    rounds = sound_epsilons_calls  # every call since the test began (tests/conftest.py)
    rounds.clear()  # the plan's own: only the re-calibration's count
    started = discrete.pool_mechanisms(plan)
    started_rounds = list(rounds)
    assert started_rounds[0][0] == 2 * len(noised)  # each group's stated point and the one below
    rounds.clear()
    unstated = plan.model_copy(update={"groups": [g.model_copy(update={"noise_multiplier_required": None})
                                                  for g in plan.groups]})
    guessed = discrete.pool_mechanisms(unstated)
    assert guessed == started
    assert rounds[0][0] == len(noised) and len(rounds) > len(started_rounds)  # the guesses: one point each first


def test_the_rdp_route_composes_each_question_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 26: in an rdp pool the bisection's last feasible point, the calibration's figure and
    the pool's figure of its binding group are one question (the same events at the same delta):
    composed once, each answer the one a fresh composition gives."""
    from planner.loading import load_scenario
    from planner.plan import make_plan

    scenario = load_scenario(EXAMPLES / "scenario.json").model_copy(update={"accountant": "rdp"})
    plan = make_plan(scenario.model_copy(update={"secagg_mechanism": "gaussian_continuous"}), "gdpfed_plus")
    asked: list[str] = []
    real = accounting.epsilon_of_events

    def counted(events: list, delta: float, accountant: AccountantName = "rdp") -> Any:
        asked.append(repr(([e.model_dump() for e in events], delta, accountant)))
        return real(events, delta=delta, accountant=accountant)

    monkeypatch.setattr(accounting, "epsilon_of_events", counted)
    pools = discrete.pool_mechanisms(plan)
    skellam = [key for key in asked if "poisson_sampled_skellam" in key]
    assert len(pools) == 3 and len(skellam) > 3 * 15
    assert len(set(skellam)) == len(skellam)  # before: 3 questions 3 times, once per pool
    for pool in pools:
        block = pool.mechanism
        event = block.event()
        fresh = real([event], delta=block.delta - block.wrap_probability_run, accountant="rdp").epsilon
        assert pool.group_epsilons[pool.binding_group] == block.epsilon == fresh


def test_the_tight_route_computes_each_pools_table_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 26: pld's certification reads each member's dominating Gaussian off its pool's
    ``unit_shift_table`` three times, after every pool's table was computed. With more pools
    than the tables unit_shift_table keeps (64; 2 here, for 3 pools), the tables were computed
    again and again (282 tables for 94 variances in a 100-pool plan); each is computed once,
    and the blocks are the same."""
    import functools

    from accounting.events import poisson_sampled_skellam as skellam
    from planner.loading import load_scenario
    from planner.plan import make_plan

    plan = make_plan(load_scenario(EXAMPLES / "scenario.json"), "gdpfed_plus")
    expected = discrete.pool_mechanisms(plan)
    computed: list[float] = []
    inner = skellam.unit_shift_table.__wrapped__

    def table(variance: float) -> Any:
        computed.append(variance)
        return inner(variance)

    small = functools.lru_cache(maxsize=2)(table)
    monkeypatch.setattr(skellam, "unit_shift_table", small)
    monkeypatch.setattr(discrete, "unit_shift_table", small)
    if hasattr(skellam.gaussian_domination, "cache_clear"):
        skellam.gaussian_domination.cache_clear()
    assert discrete.pool_mechanisms(plan) == expected
    assert len(expected) == 3 and len(computed) == len(set(computed)) == 3
