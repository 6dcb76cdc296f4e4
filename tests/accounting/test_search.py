"""The model-guided root search (docs/accounting.md §7.1) and the single-point evaluators it uses."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

import accounting
from accounting import rdp, search
from bench.accounting import CASES as BENCH_CASES
from tests.accounting.conftest import random_cases

XTOL = math.log1p(1e-4)


class Counted:
    """A function wrapper that counts its calls."""

    def __init__(self, fn):
        self.fn = fn
        self.calls = 0

    def __call__(self, x: float) -> float:
        self.calls += 1
        return self.fn(x)


def _check_bracket(found: search.Bracket, g, xtol: float) -> None:
    assert found.hi - found.lo <= xtol
    assert g(found.hi) <= 0 < g(found.lo)


@pytest.mark.parametrize(
    "model",
    [
        lambda x: 0.3 - x,  # exact up to an offset
        lambda x: 2.0 * (0.1 - x),  # wrong slope and wrong root
        lambda x: -1.0,  # says feasible everywhere: no root
        lambda x: 1.0,  # says infeasible everywhere: no root
        lambda x: math.sin(25 * x) - x,  # not monotone
        lambda x: math.nan,
    ],
)
def test_guided_keeps_the_bracket_guarantees_whatever_the_model(model) -> None:
    def g(x: float) -> float:  # non-increasing, root at 0.2, a kink at 0.25
        return 0.2 - x if x < 0.25 else -0.05 - 3.0 * (x - 0.25)

    found = search.guided(g, model, 1.5, -5.0, 5.0, XTOL)
    _check_bracket(found, g, XTOL)
    assert found.lo < 0.2 <= found.hi


def test_guided_floor_and_cap_as_plain_search() -> None:
    floor = search.guided(lambda x: -1.0, lambda x: -1.0, 0.0, -2.0, 2.0, XTOL)
    assert floor.at_floor and floor.hi == -2.0
    with pytest.raises(search.NoFeasiblePoint):
        search.guided(lambda x: 1.0, lambda x: 0.5 - x, 0.0, -2.0, 2.0, XTOL)


def test_guided_with_a_good_model_needs_at_most_three_evaluations() -> None:
    g = Counted(lambda x: math.log(2.0) - 1.7 * x - 0.01 * x * x)
    found = search.guided(g, lambda x: math.log(2.0) + 0.02 - 1.7 * x, 3.0, -5.0, 5.0, XTOL)
    _check_bracket(found, g.fn, XTOL)
    assert g.calls == found.evaluations <= 3


def test_single_point_windowed_equals_windowed_epsilons_exactly() -> None:
    grid = rdp.order_grid()
    rng = np.random.default_rng(7)
    for index, (q, sigma, t, delta) in enumerate(random_cases(60, seed=11)):
        spent = None
        if index % 3 == 0:
            spent = rdp.rdp_of_phases([(float(rng.uniform(0.01, 1.0)), float(rng.uniform(0.5, 5.0)), 20)], grid)
        windowed, model = rdp.single_point_epsilons(grid, q, t, delta, spent)
        for s in (sigma, 0.5 * sigma, 3.0 * sigma):
            expected = rdp.windowed_epsilons(grid, np.array([q]), np.array([s]), t, delta, spent)[0]
            assert windowed(s) == expected
            assert model(s) >= expected  # a subset of the windowed orders


def test_single_point_windowed_with_the_large_orders() -> None:
    grid = rdp.order_grid()
    for q, sigma, t, delta in [(1e-4, 30.0, 1, 1e-10), (1.0, 40.0, 1, 1e-12)]:
        windowed, _ = rdp.single_point_epsilons(grid, q, t, delta)
        assert windowed(sigma) == rdp.windowed_epsilons(grid, np.array([q]), np.array([sigma]), t, delta)[0]


def test_noise_multiplier_uses_few_objective_evaluations(monkeypatch: pytest.MonkeyPatch) -> None:
    """A counter, not a timing: the guided search evaluates the windowed epsilon 2-4 times
    on typical inputs (the plain bracket + refine took 6-17)."""
    counts: list[int] = []
    original = search.guided

    def counting(*args, **kwargs):
        found = original(*args, **kwargs)
        counts.append(found.evaluations)
        return found

    monkeypatch.setattr(search, "guided", counting)
    cases = BENCH_CASES  # the same ten inputs as `gdpfed bench accounting`
    for q, t, eps, delta in cases:
        result = accounting.noise_multiplier(q, t, eps, delta)
        assert result.epsilon <= eps
    assert len(counts) == len(cases)
    assert max(counts) <= 4
    assert sum(counts) <= 3 * len(cases)


def _bracketed_root(root: float, x0: float) -> search.Steps[search.Bracket]:
    """bracket then refine on g(x) = root - x written as one generator search (as pld's)."""
    start = yield from search.bracket_steps(x0, -10.0, 10.0)
    return (yield from search.refine_steps(start, XTOL))


def test_lockstep_searches_take_each_its_own_steps_and_keep_refusals() -> None:
    """docs/accounting.md §7.7: searches run side by side get exactly the bracket each gets
    alone, one answer_many call a round carries every unfinished search's point, and a search
    that raises (no feasible point below the cap) has the exception as its result."""
    roots = [-3.0, 0.2, 0.21, 4.5, 9.0]
    alone = []
    for root in roots:

        def g(x: float, root: float = root) -> float:
            return math.tanh(root - x) ** 3

        alone.append(search.refine(g, search.bracket(g, 1.0, -10.0, 10.0), XTOL))
    rounds: list[list[int]] = []

    def answer_many(points: list[tuple[int, float]]) -> list[float]:
        rounds.append([index for index, _ in points])
        return [math.tanh(roots[index] - x) ** 3 if index < len(roots) else 1.0 for index, x in points]

    searches = [_bracketed_root(r, 1.0) for r in roots] + [_bracketed_root(0.0, 1.0)]
    together = search.lockstep(searches, answer_many)
    assert together[: len(roots)] == alone
    assert isinstance(together[-1], search.NoFeasiblePoint)
    assert rounds[0] == list(range(len(roots) + 1)) and len(rounds) == max(b.evaluations for b in alone)
    failing = sum(len(roots) in r for r in rounds)  # the refused search's evaluations
    assert failing >= 2 and sum(len(r) for r in rounds) == sum(b.evaluations for b in alone) + failing


# ----------------------------------------------------------------------------- the lattice search (§7.8)

UNIT = math.log1p(1e-3)


def _lattice(
    g: Callable[[float], float], x0: float, expected: bool = False, x_min: float = -5.0, x_max: float = 5.0
) -> tuple[search.Bracket, dict[float, float]]:
    """Drive search.lattice_steps on g; the result and every point it evaluated."""
    seen: dict[float, float] = {}

    def answer(xs: list[float]) -> list[float]:
        assert 1 <= len(xs) <= 2 and not set(xs) & set(seen)  # one or two new points a round
        for x in xs:
            seen[x] = g(x)
        return [seen[x] for x in xs]

    found = search.drive(search.lattice_steps(x0, UNIT, x_min, x_max, slope=3.0, expected=expected), answer)
    return found, seen


def _least_feasible_k(g: Callable[[float], float], x_min: float = -5.0, x_max: float = 5.0) -> int:
    return next(k for k in range(math.floor(x_min / UNIT), math.ceil(x_max / UNIT) + 1) if g(k * UNIT) <= 0)


@pytest.mark.parametrize("curve", [
    lambda x: math.log(2.0 * math.exp(-2.5 * x) + 0.3 * math.exp(-0.5 * x)) - math.log(1.1),
    lambda x: -4.8 * x + 0.5 * x * x + 0.7,
    lambda x: 0.2 - 1.2 * math.tanh(x),
])
def test_lattice_search_answers_the_same_proven_point_from_any_start(curve: Callable[[float], float]) -> None:
    """Whatever the start (far below, far above, next to the root, said to be the answer or
    not), the answer is the least feasible lattice point, evaluated, with its lower neighbour
    evaluated infeasible: the same bits for every start."""
    k = _least_feasible_k(curve)
    answers = set()
    for x0 in (-4.0, -1.0, k * UNIT - 0.3, k * UNIT, (k - 1) * UNIT, k * UNIT + 0.01, 2.0, 4.5):
        for expected in (False, True):
            found, seen = _lattice(curve, x0, expected)
            assert not found.at_floor and found.hi == k * UNIT and found.lo == (k - 1) * UNIT
            assert found.hi in seen and found.lo in seen and seen[found.hi] <= 0 < seen[found.lo]
            assert found.evaluations == len(seen) <= 30
            answers.add(found.hi)
    assert len(answers) == 1


def test_lattice_search_from_its_own_answer_needs_one_round() -> None:
    """Started at its answer (a neighbouring question's), two evaluations prove it."""
    def curve(x: float) -> float:
        return 0.4 - 3.0 * x

    k = _least_feasible_k(curve)
    found, seen = _lattice(curve, k * UNIT, expected=True)
    assert found.hi == k * UNIT and len(seen) == 2


def test_lattice_search_never_trusts_its_estimate_across_a_plateau() -> None:
    """g falls as a line, then stays infeasible on a plateau before falling again: the line's
    points predict the root at x = 1.0, where a search that returned its estimate (or the
    secant's point without its lower neighbour) would answer an infeasible x. The lattice
    search answers the least feasible point beyond the plateau, proven by evaluation."""
    def g(x: float) -> float:
        if x < 0.99:
            return 1.0 - x
        if x <= 1.05:
            return 0.01
        return 0.01 - 2.0 * (x - 1.05)

    assert g(1.0) > 0  # the line's root is infeasible
    k = _least_feasible_k(g)
    for x0 in (0.0, 0.5, 0.98, 1.0, 2.0):
        found, seen = _lattice(g, x0)
        assert found.hi == k * UNIT and seen[found.hi] <= 0 < seen[found.lo] and found.lo == (k - 1) * UNIT
        assert found.hi > 1.05


def test_lattice_search_with_infinite_values_floor_and_cap() -> None:
    """inf (no finite estimate) still brackets; a feasible floor is at_floor; an infeasible cap
    raises NoFeasiblePoint, the ends being x_min and x_max themselves."""
    def wall(x: float) -> float:
        return math.inf if x < 0.3 else -math.inf

    k = _least_feasible_k(wall)
    for x0 in (-4.0, 0.0, 4.0):
        found, _ = _lattice(wall, x0)
        assert found.hi == k * UNIT and found.lo == (k - 1) * UNIT
    floor, _ = _lattice(lambda x: -1.0, 0.0)
    assert floor.at_floor and floor.hi == -5.0
    with pytest.raises(search.NoFeasiblePoint) as refused:
        _lattice(lambda x: 1.0, 0.0)
    assert refused.value.x_max == 5.0


def test_lattice_search_never_certifies_a_nan_evaluation() -> None:
    """x is feasible where g(x) <= 0 (docs/accounting.md §7.8), and NaN <= 0 is false: a point whose
    evaluation failed (NaN) is infeasible, never the answer nor the floor. Before, a NaN counted as
    feasible (``g > 0`` is false for it): a curve infeasible up to 4.0 with NaN on [1.0, 1.1) was
    answered inside the NaN stretch, and a NaN at x_min was a feasible floor."""
    def g(x: float) -> float:  # infeasible below 4.0, feasible from it; NaN on [1.0, 1.1)
        if 1.0 <= x < 1.1:
            return math.nan
        return 0.2 if x < 4.0 else -0.5

    k = _least_feasible_k(lambda x: 0.2 if x < 4.0 else -0.5)
    for x0 in (-4.0, 0.5, 1.05, 3.0, 4.5):
        for expected in (False, True):
            found, seen = _lattice(g, x0, expected)
            assert found.hi == k * UNIT and found.lo == (k - 1) * UNIT, (x0, expected, found)
            assert seen[found.hi] <= 0 < seen[found.lo]
    found, seen = _lattice(lambda x: math.nan if x < -4.9 else -1.0, 0.0)
    assert not found.at_floor and not math.isnan(seen[found.hi]) and math.isnan(seen[found.lo])
    with pytest.raises(search.NoFeasiblePoint):
        _lattice(lambda x: math.nan, 0.0)


def test_a_rising_step_crossing_the_bracket_resolves_deterministically() -> None:
    """A curve that rises once (as pld's where it fails at one sigma and answers with rdp's larger
    figure): asking a pair across the step finds the lower point feasible and the upper one not, a
    crossed bracket. The search goes on inside the evaluated points, with no assertion, and ends at
    an evaluated feasible point whose lower neighbour was evaluated infeasible; the same one each
    time from the same start."""
    k_step = 40  # g(x_k) falls through 0 at k = 10, then jumps above 0 on [40, 60) and falls again

    def rising(x: float) -> float:
        k = round(x / UNIT)
        return 0.5 if k_step <= k < k_step + 20 else 0.02 * (10.5 - k)

    # expected: the first round asks the start's point and the one below, exactly across the step
    for x0, expected in [(k_step * UNIT, True), ((k_step + 1) * UNIT, True), ((k_step + 19) * UNIT, True),
                         (70 * UNIT, False), (-3.0, False), (30 * UNIT, True)]:
        found, seen = _lattice(rising, x0, expected)
        again, _ = _lattice(rising, x0, expected)
        assert found == again
        assert rising(found.hi) <= 0 < rising(found.lo) and found.lo in seen and found.hi in seen
        assert round(found.hi / UNIT) - round(found.lo / UNIT) == 1, (x0, found)


def test_pld_calibration_is_the_least_certified_lattice_sigma_whatever_its_start() -> None:
    """pld's noise multiplier is e^{k XTOL} with its epsilon certified at most the target and
    the lattice point below it certified above; a misleading start (a neighbouring answer far
    away) changes the evaluations, not one bit of the answer."""
    from accounting.accountants import pld

    for q, t, eps, delta in [(0.01, 30, 1.0, 1e-5), (0.1, 100, 1.0, 1e-3), (1.0, 10, 2.0, 1e-5)]:
        cold = accounting.noise_multiplier(q, t, eps, delta, accountant="pld")
        sigma = cold.noise_multiplier
        k = round(math.log(sigma) / pld.XTOL)
        assert sigma == math.exp(k * pld.XTOL)
        assert pld.sound_epsilon([(q, sigma, t)], delta)[0] <= eps < pld.sound_epsilon([(q, math.exp((k - 1) * pld.XTOL), t)], delta)[0]
        for misleading in (0.2 * sigma, 5.0 * sigma):
            again = accounting.noise_multipliers([(q, t, eps, delta)], "pld", starts=[misleading])[0]
            assert isinstance(again, accounting.Calibration)
            assert again.noise_multiplier == sigma and again.epsilon == cold.epsilon


def _rounds_and_evaluations(g: Callable[[float], float], x0: float) -> tuple[search.Bracket, int, int]:
    """Drive search.lattice_steps on g from x0: the result, its rounds and its evaluations."""
    rounds: list[int] = []

    def answer(xs: list[float]) -> list[float]:
        rounds.append(len(xs))
        return [g(x) for x in xs]

    found = search.drive(search.lattice_steps(x0, UNIT, -5.0, 5.0, slope=3.0), answer)
    return found, len(rounds), sum(rounds)


@pytest.mark.parametrize("curve", [
    lambda x: math.log(2.0 * math.exp(-2.5 * x) + 0.3 * math.exp(-0.5 * x)) - math.log(1.1),
    lambda x: -4.8 * x + 0.5 * x * x + 0.7,
    lambda x: 0.2 - 1.2 * math.tanh(x),
])
def test_lattice_search_from_far_away_closes_in_within_five_rounds(curve: Callable[[float], float]) -> None:
    """A start 100-400 lattice points from the root (pld's first guess is up to 400 away on the
    bench's 1,000 groups): at most five rounds and seven evaluations. The search took up to nine
    rounds and ten evaluations where it bisected a bracket whose new point sat next to the root
    (its far end the stale first guess), or doubled its jump away from a root its estimates were
    closing in on (docs/accounting.md §7.8)."""
    k = _least_feasible_k(curve)
    for offset in (-400, -300, -200, -100, 100, 200, 300, 400):
        found, rounds, evaluations = _rounds_and_evaluations(curve, (k + offset) * UNIT)
        assert found.hi == k * UNIT and found.lo == (k - 1) * UNIT
        assert rounds <= 5 and evaluations <= 7, (offset, rounds, evaluations)


@pytest.mark.parametrize("curve", [
    lambda x: 1e-3 * math.exp(-x) if x < 4.0 else -1.0,  # creeps towards 0, feasible only at 4
    lambda x: 0.3 if x < 3.5 else -1.0,  # a plateau: no slope to estimate from
    lambda x: 1e-9 * (4.2 - x) if x < 4.2 else -1.0,  # the secant says "next point" every round
    lambda x: -1e-9 * (x + 4.2) if x > -4.2 else 1.0,  # the same from above
    # halves at each lattice point: every secant says the root is one point on
    lambda x: 0.5 ** max(-1000.0, min(x / UNIT, 1000.0)) if x < 4.0 else -1.0,
])
def test_lattice_search_rounds_stay_logarithmic_for_misleading_curves(curve: Callable[[float], float]) -> None:
    """Estimates that keep falling short (each says the root is a few points on) cannot make the
    search walk: its jumps shrink by a factor 4 at least, then double, and inside a bracket only
    the first round may fail to halve it without a bisection next, so the 10,000 lattice points
    take at most about 3 log2(10,000) = 40 rounds, and the answer is the least feasible point,
    proven. (A guard on the termination argument, docs/accounting.md §7.8: the search before it
    took at most 29 rounds on these curves, the new one 34.)"""
    k = _least_feasible_k(curve)
    for x0 in (-4.0, 0.0, 3.0):
        found, rounds, _ = _rounds_and_evaluations(curve, x0)
        assert found.hi == k * UNIT and found.lo == (k - 1) * UNIT
        assert rounds <= 40, (x0, rounds)


def test_pld_lockstep_of_forty_questions_takes_five_rounds() -> None:
    """An evaluation count, not a timing: forty of the planner bench's questions (rates 0.0025-0.35,
    budgets 0.5-8, 100 rounds, delta 1e-5) calibrated by pld in lockstep take at most 5 rounds and
    185 compositions (the search before docs/accounting.md §7.8's closing-in rules: 10 rounds, 200
    compositions), and each answer is the least certified lattice sigma, as alone."""
    from accounting.accountants import pld

    rng = np.random.default_rng(7)
    rates = np.exp(rng.uniform(math.log(0.0025), math.log(0.35), 40))
    budgets = np.exp(rng.uniform(math.log(0.5), math.log(8.0), 40))
    questions = [(float(q), 100, float(eps), 1e-5) for q, eps in zip(rates, budgets, strict=True)]
    rounds: list[int] = []
    original = search.lockstep

    def counting(searches, answer_many):
        def counted(points):
            rounds.append(sum(len(sigmas) for _, sigmas in points))
            return answer_many(points)

        return original(searches, counted)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(search, "lockstep", counting)
        answers = accounting.noise_multipliers(questions, "pld")
    assert len(rounds) <= 5 and sum(rounds) <= 185, rounds
    for (q, t, eps, delta), answer in list(zip(questions, answers, strict=True))[::8]:
        assert isinstance(answer, accounting.Calibration)
        k = round(math.log(answer.noise_multiplier) / pld.XTOL)
        assert answer.noise_multiplier == math.exp(k * pld.XTOL)
        below = pld.sound_epsilon([(q, math.exp((k - 1) * pld.XTOL), t)], delta)[0]
        assert answer.epsilon == pld.sound_epsilon([(q, answer.noise_multiplier, t)], delta)[0] <= eps < below


SPENT_QUESTIONS = [  # (q, T, target, spent (q, sigma, steps)): a re-plan's groups, spent 49-66% of the budget
    (0.01, 60, 0.8, (0.0184, 0.8712, 40)),
    (0.0421, 60, 2.0, (0.0641, 1.2164, 40)),
    (0.144, 60, 4.0, (0.2174, 1.9634, 40)),
    (0.0083, 60, 2.0, (0.0641, 1.2164, 40)),
    (0.01, 100, 1.0, (0.01, 1.0, 200)),
    (0.05, 50, 3.0, (0.05, 1.1, 100)),
]


def test_pld_calibration_after_spent_events_searches_the_share_left(
    sound_epsilons_calls: list[tuple[int, float]],
) -> None:
    """After spent events that took most of the budget, log(epsilon / target) barely moves with
    sigma and a Newton step of the typical slope landed far from the root; the search's g is the
    new phase's share of what is left, log((epsilon - spent) / (target - spent)), with the same
    sign (docs/accounting.md §13.5). Six re-plan questions take at most 37 compositions (the spent
    history's own included; 48 on log(epsilon / target)), and each answer is the least certified
    lattice sigma, the same from a misleading start."""
    from accounting.accountants import pld
    from accounting.events import PoissonSampledGaussian

    delta = 1e-3
    answers = []
    for q, t, target, (sq, ss, st) in SPENT_QUESTIONS:
        spent = [PoissonSampledGaussian(sampling_rate=sq, noise_multiplier=ss, steps=st)]
        answers.append(accounting.noise_multiplier(q, t, target, delta, "pld", spent=spent))
    compositions = sum(count for count, _ in sound_epsilons_calls)
    assert compositions <= 37, compositions
    for (q, t, target, phase), answer in zip(SPENT_QUESTIONS, answers, strict=True):
        sigma = answer.noise_multiplier
        k = round(math.log(sigma) / pld.XTOL)
        assert sigma == math.exp(k * pld.XTOL) and answer.spent_epsilon is not None
        assert answer.epsilon == pld.sound_epsilon([phase, (q, sigma, t)], delta)[0] <= target
        assert pld.sound_epsilon([phase, (q, math.exp((k - 1) * pld.XTOL), t)], delta)[0] > target
    spent_lists = [[PoissonSampledGaussian(sampling_rate=sq, noise_multiplier=ss, steps=st)]
                   for *_, (sq, ss, st) in SPENT_QUESTIONS]
    for scale in (0.2, 5.0):
        again = accounting.noise_multipliers(
            [(q, t, target, delta) for q, t, target, _ in SPENT_QUESTIONS], "pld", spent=spent_lists,
            starts=[scale * a.noise_multiplier for a in answers],
        )
        assert [a.noise_multiplier for a in again] == [a.noise_multiplier for a in answers]  # type: ignore[union-attr]


def test_the_shifted_ratio_keeps_the_sign_of_feasibility() -> None:
    """g after spent events is feasible (<= 0) exactly where epsilon <= target, including values a
    rounding error apart and epsilons at or below the spent one."""
    from accounting.accountants.pld import _shifted_ratio

    rng = np.random.default_rng(3)
    for _ in range(2000):
        target = float(rng.uniform(0.1, 10.0))
        spent = float(target * rng.uniform(0.0, 1.0))
        for epsilon in (float(target * rng.uniform(0.0, 2.0)), target, math.nextafter(target, math.inf),
                        math.nextafter(target, 0.0), spent, 0.0, math.inf, math.nan):
            assert (_shifted_ratio(epsilon, target, spent) <= 0) == (epsilon <= target), (epsilon, target, spent)


def _nan_stretch(x: float) -> float:
    """Decreasing through 0 at 0.5, but NaN on [0.3, 0.6): with NaN infeasible, the least feasible
    point is 0.6 (g jumps from NaN to -0.1 there)."""
    if 0.3 <= x < 0.6:
        return math.nan
    return 0.5 - x


def _search_nan_stretch(name: str, x0: float, xtol: float) -> float:
    """The answer ``hi`` of the search ``name`` on :func:`_nan_stretch` from x0."""
    if name == "bracket":
        found = search.bracket(_nan_stretch, x0, -5.0, 5.0)
        assert found.lo < 0.6 and not math.isnan(found.g_hi), found
        return 0.6 if found.hi >= 0.6 else found.hi  # a bracket's hi is any feasible point
    if name == "refine":
        return search.refine(_nan_stretch, search.bracket(lambda x: 0.6 - x, x0, -5.0, 5.0), xtol).hi
    if name == "refine_wide":  # the NaN stretch inside a proven bracket
        return search.refine(_nan_stretch, search.Bracket(0.0, 2.0, 0.5, -1.5, 2, False), xtol).hi
    if name == "guided":
        return search.guided(_nan_stretch, lambda x: 0.5 - x, x0, -5.0, 5.0, xtol).hi
    xs = search.vector_search(
        lambda points, v: np.array([_nan_stretch(float(x)) for x in v]), np.array([x0, x0 + 0.01]), -5.0, 5.0, xtol
    )
    assert xs[0] == xs[0] and xs[1] == xs[1]
    return float(max(xs)) if min(xs) >= 0.6 else float(min(xs))


@pytest.mark.parametrize("name", ["bracket", "refine", "refine_wide", "guided", "vector_search"])
@pytest.mark.parametrize("x0", [-0.5, 0.0, 0.35, 0.45, 0.55, 0.65, 1.0, 2.5])
def test_every_search_takes_a_nan_evaluation_as_infeasible(name: str, x0: float) -> None:
    """x is feasible where g(x) <= 0 and NaN <= 0 is false (docs/accounting.md §7, search.infeasible_nan):
    bracket, refine, guided and vector_search, like lattice_steps, never answer a point whose
    evaluation was NaN: on a g NaN on [0.3, 0.6) and decreasing through 0 at 0.5, the answer is
    within xtol above 0.6. Before, ``g > 0`` was false for a NaN, so it counted as feasible:
    bracket(g, 0.35, ...) returned hi=0.35 with g_hi=nan."""
    xtol = 1e-3
    hi = _search_nan_stretch(name, x0, xtol)
    assert 0.6 <= hi <= 0.6 + xtol and not math.isnan(_nan_stretch(hi)), hi


def test_a_search_where_g_is_nan_everywhere_finds_no_feasible_point() -> None:
    """NaN everywhere is an infeasible range: NoFeasiblePoint, as for a g positive up to the cap
    (before, the first NaN was taken as feasible and returned as the answer)."""
    with pytest.raises(search.NoFeasiblePoint):
        search.bracket(lambda x: math.nan, 0.0, -5.0, 5.0)
    with pytest.raises(search.NoFeasiblePoint):
        search.guided(lambda x: math.nan, lambda x: 0.5 - x, 0.0, -5.0, 5.0, 1e-3)
    out = search.vector_search(lambda points, xs: np.full(xs.size, np.nan), np.zeros(3), -5.0, 5.0, 1e-3)
    assert np.all(np.isinf(out)), out
    refined = search.refine(lambda x: math.nan, search.Bracket(0.0, 2.0, 0.5, -1.5, 2, False), 1e-3)
    assert refined.hi == 2.0 and refined.lo > 2.0 - 1e-3, refined  # never a NaN point below the proven end
