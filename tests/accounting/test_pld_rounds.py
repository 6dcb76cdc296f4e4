"""pld's rounds search (docs/accounting.md §7.4): steps on log T from a guess, certified, so
fewer compositions than the exponential-then-binary search and the same T from any start."""

from __future__ import annotations

import pytest

from accounting import search
from accounting.accountants import pld
from accounting.accountants.base import ROUNDS_MAX

# bench/startup.py's rounds question, test_cli's at epsilon 2, and the accounting bench's kinds
QUESTIONS = [(0.01, 1.0, 1.0, 1e-5), (0.01, 1.0, 2.0, 1e-5), (0.001, 0.8, 0.5, 1e-6), (0.05, 1.5, 1.0, 1e-4)]


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    composed = [0]
    compose_many = pld.compose_many

    def counting(histories, *args, **kwargs):
        composed[0] += len(histories)
        return compose_many(histories, *args, **kwargs)

    monkeypatch.setattr(pld, "compose_many", counting)
    return composed


@pytest.mark.parametrize("question", QUESTIONS)
def test_pld_rounds_composes_fewer_histories_for_the_same_answer(
    monkeypatch: pytest.MonkeyPatch, question: tuple[float, float, float, float]
) -> None:
    """The exponential-then-binary integer search (search.integer_search, still rdp's) composed 17
    PLD pairs for bench/startup.py's question; the log-T steps from rdp.rounds_guess compose fewer,
    and the answer is the old search's T (certified: T fits, T + 1 does not)."""
    q, sigma, target, delta = question
    composed = _counted(monkeypatch)
    answer = pld.PldAccountant().rounds(q, sigma, target, delta, [])
    new_cost = composed[0]
    accountant = pld.PldAccountant()
    history = accountant._history([], delta, target, lambda: None)  # type: ignore[arg-type,return-value]
    assert isinstance(history, pld.History)

    def fits(count: int) -> bool:
        return pld.sound_epsilon(history.plus(q, sigma, count), history.composed_at(delta))[0] <= target

    composed[0] = 0
    old = search.integer_search(fits, ROUNDS_MAX)
    old_cost = composed[0] + 2  # the result's own composition (a pair), as rounds() adds it
    assert answer.rounds == old and fits(old) and not fits(old + 1)
    assert new_cost < old_cost, (new_cost, old_cost)


@pytest.mark.parametrize("question", QUESTIONS)
def test_pld_rounds_search_lands_on_the_same_t_from_any_start(question: tuple[float, float, float, float]) -> None:
    """search.largest_fitting's answer is certified, so the start changes the cost, not the T."""
    q, sigma, target, delta = question
    history = pld.PldAccountant()._history([], delta, target, lambda: None)  # type: ignore[arg-type,return-value]
    assert isinstance(history, pld.History)

    def excess(count: int) -> float:
        epsilon = pld.sound_epsilon(history.plus(q, sigma, count), history.composed_at(delta))[0]
        return search.log_ratio(epsilon, target) if epsilon <= target else max(search.log_ratio(epsilon, target), 1e-300)

    answers = {search.largest_fitting(excess, ROUNDS_MAX, start) for start in (1, 7, 100, 5000, 10**6)}
    assert answers == {pld.PldAccountant().rounds(q, sigma, target, delta, []).rounds}


def test_largest_fitting_is_certified_for_any_start() -> None:
    """A g rising like log sqrt(n), a step, NaN beyond a point: the largest fitting n from every start."""
    import math

    for root in (1, 2, 17, 254, 10**5):
        smooth = lambda n, r=root: 0.5 * math.log(n / (r + 0.5))  # noqa: E731
        step = lambda n, r=root: -1.0 if n <= r else 3.0  # noqa: E731
        nan = lambda n, r=root: -0.2 if n <= r else math.nan  # noqa: E731
        for g in (smooth, step, nan):
            for start in (1, 3, root, root + 1, 10**6, 10**9):
                assert search.largest_fitting(g, ROUNDS_MAX, start) == root, (root, start)
    assert search.largest_fitting(lambda n: 1.0, ROUNDS_MAX, 50) == 0
    assert search.largest_fitting(lambda n: -1.0, 1000, 3) == 1000
