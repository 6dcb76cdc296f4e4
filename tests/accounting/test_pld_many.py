"""Many calibrations in one call (docs/accounting.md §7.7, §13.7) and the first step every
inverse question of an accountant with a fallback shares (``Accountant.history_or_fallback``)."""

from __future__ import annotations

import pytest

import accounting
from accounting.accountants import ACCOUNTANTS, AccountantName
from accounting.accountants import pld as pld_module
from accounting.accountants.base import History
from accounting.errors import InfeasibleError, InvalidInputError
from accounting.events import PoissonSampledGaussian, ZeroConcentratedDp
from accounting.results import Calibration

SPENT = [PoissonSampledGaussian(sampling_rate=0.01, noise_multiplier=1.0, steps=200)]
ZCDP = [ZeroConcentratedDp.exponential_mechanism(0.5, 3)]
# (question, spent): plain targets of the accounting bench, a spent history, a spent zCDP
# selection (rdp answers), spent phases above the target, a target met only above the
# sigma cap, a tiny sampling rate, a history whose error terms swamp delta (rdp
# answers the final figure) and a second delta
QUESTIONS: list[tuple[tuple[float, int, float, float], list]] = [
    ((0.01, 1000, 1.0, 1e-5), []),
    ((0.02, 300, 8.0, 1e-5), []),
    ((1.0, 10, 4.0, 1e-5), []),
    ((0.005, 800, 0.8, 1e-5), []),
    ((0.01, 200, 2.0, 1e-5), SPENT),
    ((0.01, 100, 3.0, 1e-5), ZCDP),
    ((0.01, 200, 0.1, 1e-5), SPENT),
    ((1.0, 1000, 1e-4, 1e-5), []),
    ((1e-6, 10, 50.0, 1e-5), []),
    ((1e-4, 5000, 0.05, 1e-8), []),
    ((0.1, 100, 1.0, 1e-3), []),
]


def _one(question: tuple[float, int, float, float], spent: list) -> Calibration | InfeasibleError:
    try:
        return accounting.noise_multiplier(*question, accountant="pld", spent=spent)
    except InfeasibleError as exc:
        return exc


def _same(a: Calibration | InfeasibleError, b: Calibration | InfeasibleError) -> bool:
    if isinstance(a, InfeasibleError) or isinstance(b, InfeasibleError):
        return type(a) is type(b) and str(a) == str(b)
    return a == b


def test_many_calibrations_are_each_question_alone_bit_for_bit() -> None:
    """Every entry is what noise_multiplier returns (or raises) for its question alone: the
    same sigma to the last bit, its epsilon, fallback and reason, spent figure included."""
    together = accounting.noise_multipliers([q for q, _ in QUESTIONS], "pld", spent=[s for _, s in QUESTIONS])
    alone = [_one(q, s) for q, s in QUESTIONS]
    assert len(together) == len(alone)
    for question, a, b in zip(QUESTIONS, together, alone, strict=True):
        assert _same(a, b), question
    kinds = [type(a).__name__ for a in together]
    assert kinds.count("InfeasibleError") == 2 and isinstance(together[5], Calibration) and together[5].fallback


def test_the_searches_share_each_rounds_composition(sound_epsilons_calls: list[tuple[int, float]]) -> None:
    """The questions' searches run in lockstep: each round's sigmas are composed by one call
    of sound_epsilons, so there are as many calls as the longest search has evaluations, not
    one per evaluation of every question."""
    questions = [q for q, _ in QUESTIONS[:4]]
    accounting.noise_multipliers(questions, "pld")
    calls = [count for count, _ in sound_epsilons_calls]
    # each search proves its answer by two evaluations at least (the lattice point and the one below)
    assert sum(calls) >= 4 * 2 and len(calls) < sum(calls) and calls[0] == 4


def test_a_question_asked_again_at_a_smaller_delta_is_proven_in_one_round(
    sound_epsilons_calls: list[tuple[int, float]],
) -> None:
    """The discrete blocks' re-calibration (docs/accounting.md §13.5): each group's question again
    at delta less a tiny wrap charge, started from its continuous answer (``starts``), is proven by
    one round of two evaluations per question, the answer the one a search from its own guess gets."""
    questions = [q for q, _ in QUESTIONS[:2]] + [QUESTIONS[3][0]]
    first = accounting.noise_multipliers(questions, "pld")
    starts = [answer.noise_multiplier for answer in first if isinstance(answer, Calibration)]
    smaller = [(q, t, eps, delta - 1e-12) for q, t, eps, delta in questions]
    sound_epsilons_calls.clear()  # the first answers' calls: only the re-calibration's count
    again = accounting.noise_multipliers(smaller, "pld", starts=starts)
    calls = [count for count, _ in sound_epsilons_calls]
    assert calls == [2 * len(questions)]
    assert again == accounting.noise_multipliers(smaller, "pld")


def test_an_answer_does_not_depend_on_what_was_asked_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """No answer is kept between calls (the service answers many questions in one process): on a
    curve where epsilon rises once with sigma (pld answers a sigma it fails at with rdp's larger
    figure), a question gets the same noise multiplier whether or not a neighbouring question (the
    same one at another delta) was asked first. A search kept each question's last answer as the
    next one's start, and from there found the feasible sigma above the rise instead."""

    def curve(items: list, delta: float | None = None) -> list:
        out = []
        for phases, at in items:
            sigma = phases[-1][1]
            rising = at < 1.5e-5 and 0.5 <= sigma < 2.0  # feasible here at the smaller delta only
            out.append((0.5 if rising or sigma >= 3.0 else 2.0, None))
        return out

    monkeypatch.setattr(pld_module, "_sound_answers", curve)
    question = (0.01, 1000, 1.0, 1e-5)
    fresh = accounting.noise_multiplier(*question, accountant="pld")
    assert 0.5 <= fresh.noise_multiplier < 0.51
    accounting.noise_multiplier(0.01, 1000, 1.0, 2e-5, accountant="pld")  # answered above 3
    assert _same(accounting.noise_multiplier(*question, accountant="pld"), fresh)
    assert _same(accounting.noise_multipliers([question], "pld")[0], fresh)


def test_the_same_question_twice_is_searched_once(sound_epsilons_calls: list[tuple[int, float]]) -> None:
    """Groups with the same rate, rounds, budget and spent history (a pool's members of one
    tier) share one search: each round composes their history once, and each gets the answer
    noise_multiplier gives alone, bit for bit, infeasible ones their InfeasibleError."""
    distinct = [QUESTIONS[0], QUESTIONS[4], QUESTIONS[6]]  # plain, a spent history, infeasible
    repeated = [distinct[0], distinct[1], distinct[0], distinct[2], distinct[1], distinct[2]]
    together = accounting.noise_multipliers([q for q, _ in repeated], "pld", spent=[s for _, s in repeated])
    # two searches (the infeasible one never searches), two points a round at most
    assert max(count for count, _ in sound_epsilons_calls) <= 2 * 2
    for (question, spent), answer in zip(repeated, together, strict=True):
        assert _same(answer, _one(question, spent)), question
    assert isinstance(together[3], InfeasibleError) and together[0] is not together[2]


def test_other_accountants_answer_one_question_at_a_time_alike() -> None:
    questions = [(0.01, 1000, 1.0, 1e-5), (1.0, 1000, 1e-4, 1e-5)]
    names: list[AccountantName] = ["rdp", "closed_form"]
    for name in names:
        together = accounting.noise_multipliers(questions, name)
        alone: list[Calibration | InfeasibleError] = []
        for question in questions:
            try:
                alone.append(accounting.noise_multiplier(*question, accountant=name))
            except InfeasibleError as exc:
                alone.append(exc)
        assert all(_same(a, b) for a, b in zip(together, alone, strict=True))


@pytest.mark.parametrize(
    ("questions", "spent", "field"),
    [
        ([(0.1, 10, -1.0, 1e-5)], None, "questions[0].epsilon"),
        ([(0.1, 10, 1.0, 1e-5), (1.5, 10, 1.0, 1e-5)], None, "questions[1].sampling_rate"),
        ([(0.1, 0, 1.0, 1e-5)], None, "questions[0].rounds"),
        ([(0.1, 10, 1.0, 1.0)], None, "questions[0].delta"),
        ([(0.1, 10, 1.0)], None, "questions[0]"),
        ([(0.1, 10, 1.0, 1e-5)], [[], []], "spent"),
        ([(0.1, 10, 1.0, 1e-5)], [[{"kind": "nope"}]], "spent[0][0]"),
    ],
)
def test_a_bad_question_is_refused_naming_it(questions: list, spent: list | None, field: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        accounting.noise_multipliers(questions, "pld", spent=spent)
    assert caught.value.field.startswith(field)


def test_history_or_fallback_is_the_spent_history_or_the_fallbacks_answer() -> None:
    """The shared first step: unrepresented events get the fallback's answer marked with the
    reason; spent phases beyond the target are refused; otherwise the phases and their epsilon."""
    accountant = ACCOUNTANTS["pld"]
    rdp_answer = accounting.noise_multiplier(0.01, 100, 3.0, 1e-5, accountant="rdp", spent=ZCDP)
    marked = accountant.history_or_fallback(ZCDP, 1e-5, 3.0, lambda: rdp_answer, lambda phases: 0.0)
    assert isinstance(marked, Calibration) and marked.fallback and marked.accountant == "pld"
    assert marked.noise_multiplier == rdp_answer.noise_multiplier and "zcdp" in (marked.reason or "")
    history = accountant.history_or_fallback(SPENT, 1e-5, 2.0, lambda: rdp_answer, lambda phases: 0.5)
    assert isinstance(history, History) and history == History([(0.01, 1.0, 200)], 0.5) and history.plus(0.1, 2.0, 3) == [(0.01, 1.0, 200), (0.1, 2.0, 3)]
    assert accountant.history_or_fallback([], 1e-5, 2.0, lambda: rdp_answer, lambda phases: 9.0) == History([], None)
    with pytest.raises(InfeasibleError, match="spent events alone"):
        accountant.history_or_fallback(SPENT, 1e-5, 2.0, lambda: rdp_answer, lambda phases: 2.5)


def test_skellam_histories_calibrate_in_lockstep_as_one_at_a_time() -> None:
    """A spent Poisson-subsampled Skellam event is composed as its dominating Gaussian phase at
    delta less its tail mass (docs/accounting.md §11.7) in the lockstep searches as in
    noise_multiplier: the same answer bit for bit, among Gaussian-only questions at the full
    delta; a tail mass above delta refuses the question (epsilon inf) and an untabulated
    event is answered by rdp, marked, in both."""
    from accounting.accountants.pld import _phases, _pld_delta, sound_epsilon
    from accounting.events import PoissonSampledSkellam

    def skellam(sampling_rate: float, variance: float, sensitivity: float, steps: int) -> PoissonSampledSkellam:
        return PoissonSampledSkellam(
            sampling_rate=sampling_rate, variance=variance, l2_sensitivity=sensitivity, l1_sensitivity=sensitivity, steps=steps
        )

    realistic = [PoissonSampledSkellam(sampling_rate=0.05, variance=4e4, l2_sensitivity=101.0, l1_sensitivity=900.0, steps=40)]
    charged = [skellam(1e-3, 100.0, 240.0, 10), *SPENT]  # its tail mass is about 1% of delta
    spent_all = [skellam(1e-3, 100.0, 250.0, 10)]  # its tail mass is above delta
    untabulated = [PoissonSampledSkellam(sampling_rate=0.01, variance=2e10, l2_sensitivity=9e3, l1_sensitivity=9e5, steps=1)]
    asked: list[tuple[tuple[float, int, float, float], list]] = [
        ((0.05, 40, 3.0, 1e-5), realistic),
        ((0.05, 40, 3.0, 1e-5), []),
        ((0.05, 40, 1000.0, 1e-5), charged),
        ((0.05, 40, 3.0, 1e-5), spent_all),
        ((0.05, 40, 3.0, 1e-5), untabulated),
        ((0.05, 40, 3.0, 1e-5), SPENT),
    ]
    together = accounting.noise_multipliers([q for q, _ in asked], "pld", spent=[s for _, s in asked])
    alone = [_one(q, s) for q, s in asked]
    for question, a, b in zip(asked, together, alone, strict=True):
        assert _same(a, b), question
    first, _, reduced, refused, marked, _ = together
    assert isinstance(first, Calibration) and first.accountant_used == "pld" and not first.fallback
    assert isinstance(reduced, Calibration) and reduced.accountant_used == "pld" and not reduced.fallback
    at = _pld_delta(charged, 1e-5)
    assert 0 < at < 1e-5 * 0.999
    history = [*_phases(charged), (0.05, reduced.noise_multiplier, 40)]
    assert reduced.epsilon == sound_epsilon(history, at)[0] and reduced.spent_epsilon == sound_epsilon(_phases(charged), at)[0]
    assert isinstance(refused, InfeasibleError) and "epsilon inf" in str(refused)
    assert isinstance(marked, Calibration) and marked.fallback and "tabulated" in (marked.reason or "")


@pytest.mark.parametrize(("starts", "field"), [([1.0], "starts"), ([0.0, None], "starts[0]"), ([None, float("nan")], "starts[1]")])
def test_bad_starts_are_refused_naming_the_field(starts: list, field: str) -> None:
    """``starts`` is one positive noise multiplier or None per question, refused naming it otherwise."""
    questions = [QUESTIONS[0][0], QUESTIONS[1][0]]
    with pytest.raises(InvalidInputError) as refused:
        accounting.noise_multipliers(questions, "pld", starts=starts)
    assert refused.value.field == field
