"""The model-guided root search (docs/accounting.md §7.1) and the single-point evaluators it uses."""

from __future__ import annotations

import math

import numpy as np
import pytest

import accounting
from accounting import rdp, search
from bench.accounting import CASES as BENCH_CASES
from tests.accounting.conftest import random_cases

XTOL = math.log1p(1e-4)


class Counted:
    """A function wrapper that counts its calls."""

    def __init__(self, fn):  # type: ignore[no-untyped-def]
        self.fn = fn
        self.calls = 0

    def __call__(self, x: float) -> float:
        self.calls += 1
        return self.fn(x)


def _check_bracket(found: search.Bracket, g, xtol: float) -> None:  # type: ignore[no-untyped-def]
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
def test_guided_keeps_the_bracket_guarantees_whatever_the_model(model) -> None:  # type: ignore[no-untyped-def]
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

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
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
