"""Empirical privacy audit: a Clopper-Pearson lower bound on epsilon from a threshold test.

A mechanism run many times on two neighbouring inputs gives two samples of a score
(larger under the input with the target's data). Any (epsilon, delta)-DP mechanism
satisfies, for the rejection set S = {score >= tau} and for its complement,

    P_with(S)     <= e^eps P_without(S)     + delta,   i.e.  eps >= log((1 - delta - FNR) / FPR),
    P_without(S^c) <= e^eps P_with(S^c)     + delta,   i.e.  eps >= log((1 - delta - FPR) / FNR),

with FPR = P_without(score >= tau) and FNR = P_with(score < tau) (Kairouz, Oh, Viswanath
2015; the auditing recipe of Jagielski, Ullman, Oprea 2020 and Nasr et al. 2021). The
threshold and direction are chosen on one half of the runs and the rates bounded on the
other half with one-sided Clopper-Pearson intervals (each at (1 - confidence) / 2, a
union bound), so the returned lower bound holds with probability >= ``confidence`` over
the runs: if it exceeds an accounted epsilon, the accounting (or the mechanism) is wrong.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy import stats

from accounting.errors import InvalidInputError
from accounting.validation import validate_delta


class AuditResult(NamedTuple):
    epsilon_lower: float  # holds with probability >= confidence
    threshold: float
    direction: str  # "with_above": S = {score >= threshold} rejects "without"
    false_positive_upper: float
    false_negative_upper: float
    runs: int  # per input, evaluation half
    confidence: float


def clopper_pearson_upper(successes: int, trials: int, alpha: float) -> float:
    """The one-sided (1 - alpha) Clopper-Pearson upper bound on a binomial proportion."""
    if successes >= trials:
        return 1.0
    return float(stats.beta.ppf(1.0 - alpha, successes + 1, trials - successes))


def _rates(without: np.ndarray, with_: np.ndarray, thresholds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Counts of without >= tau (false positives) and with < tau (false negatives) per threshold."""
    sorted_without, sorted_with = np.sort(without), np.sort(with_)
    false_pos = without.size - np.searchsorted(sorted_without, thresholds, side="left")
    false_neg = np.searchsorted(sorted_with, thresholds, side="left")
    return false_pos, false_neg


def _bound(fp_upper: float, fn_upper: float, delta: float) -> float:
    top = 1.0 - delta - fn_upper
    return math.log(top / fp_upper) if top > 0 and fp_upper > 0 else 0.0


def epsilon_lower_bound(
    scores_without: np.ndarray, scores_with: np.ndarray, delta: float, confidence: float = 0.95
) -> AuditResult:
    """A lower bound on the epsilon of the mechanism that produced the two score samples (see module doc)."""
    delta = validate_delta(delta)
    if not 0.0 < confidence < 1.0:
        raise InvalidInputError("confidence", "must be in (0, 1)")
    without = np.asarray(scores_without, dtype=float).ravel()
    with_ = np.asarray(scores_with, dtype=float).ravel()
    if without.size < 4 or with_.size < 4:
        raise InvalidInputError("scores", "need at least 4 runs per input")
    half_without, half_with = without.size // 2, with_.size // 2
    pick_without, eval_without = without[:half_without], without[half_without:]
    pick_with, eval_with = with_[:half_with], with_[half_with:]
    alpha = (1.0 - confidence) / 2.0
    candidates = np.unique(np.quantile(np.concatenate((pick_without, pick_with)), np.linspace(0.0, 1.0, 401)))
    fp, fn = _rates(pick_without, pick_with, candidates)
    best = (0.0, float(candidates[0]), "with_above")
    for index, tau in enumerate(candidates):
        fp_u = clopper_pearson_upper(int(fp[index]), pick_without.size, alpha)
        fn_u = clopper_pearson_upper(int(fn[index]), pick_with.size, alpha)
        for value, direction in ((_bound(fp_u, fn_u, delta), "with_above"), (_bound(fn_u, fp_u, delta), "with_below")):
            if value > best[0]:
                best = (value, float(tau), direction)
    _, tau, direction = best
    fp_e, fn_e = _rates(eval_without, eval_with, np.array([tau]))
    fp_u = clopper_pearson_upper(int(fp_e[0]), eval_without.size, alpha)
    fn_u = clopper_pearson_upper(int(fn_e[0]), eval_with.size, alpha)
    value = _bound(fp_u, fn_u, delta) if direction == "with_above" else _bound(fn_u, fp_u, delta)
    return AuditResult(max(0.0, value), tau, direction, fp_u, fn_u, min(eval_without.size, eval_with.size), confidence)


def audit_summary(
    accounted: float, scores_without: np.ndarray, scores_with: np.ndarray, delta: float, confidence: float = 0.95,
    *, accountant: str | None, notion: str, figure: str = "epsilon",
) -> dict[str, object]:
    """The fields every audit reports (docs/secure-aggregation.md §Audit): the accounted figure,
    the accountant that priced it (None where it is not an accountant's: a metric leakage adds
    up) and its privacy notion (a unit's label: client-level, silo sample-level), the lower bound
    from the two score samples (:func:`epsilon_lower_bound`) and whether the bound exceeds the
    accounted figure (a violation: the accounting or the mechanism is wrong)."""
    result = epsilon_lower_bound(scores_without, scores_with, delta, confidence)
    return {
        "runs": int(np.asarray(scores_without).size),
        "delta": delta,
        "accountant": accountant,
        "notion": notion,
        "figure": figure,
        "accounted_epsilon": accounted,
        "epsilon_lower_bound": result.epsilon_lower,
        "confidence": result.confidence,
        "violated": result.epsilon_lower > accounted,
    }


def audit_text(mechanism: str, result: dict[str, object]) -> str:
    """The one line ``gdpfed audit`` prints (docs/secure-aggregation.md §Audit): the accounted
    figure with its privacy notion and the accountant that priced it, every time, so figures of
    different notions or accountants are never read as one; then the audited lower bound (a
    Clopper-Pearson bound from the runs, no accountant's) and the verdict."""
    verdict = "VIOLATED: the lower bound exceeds the accounted epsilon" if result["violated"] else "consistent"
    accountant = result.get("accountant")
    priced = f"{result['notion']}, accountant {accountant}" if accountant else f"{result['notion']}, added up: no accountant"
    return (
        f"audit {mechanism}: accounted {result.get('figure', 'epsilon')} {result['accounted_epsilon']:.4g} ({priced}), "
        f"audited lower bound {result['epsilon_lower_bound']:.4g} ({result['confidence']:.0%} confidence, "
        f"{result['runs']} runs per input, delta {result['delta']:g}): {verdict}"
    )
