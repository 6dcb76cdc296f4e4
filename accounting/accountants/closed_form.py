"""The ``closed_form`` accountant: the GDPFed paper's bound, always checked by rdp (docs/accounting.md §6).

The formula (:mod:`accounting.closed_form`) describes one phase of the Poisson-subsampled
Gaussian and can under-state epsilon outside its lemma's conditions, so nothing it says
is claimed unchecked: epsilon reports carry the rdp value (the formula's own value in
``estimate``), and every calibration is checked with rdp and replaced by rdp's answer
where the formula misses the target (``replaced: true``, still ``sound``), unless the
caller asks for the ``raw`` formula (then ``sound: false``). Plans and ledgers of this
accountant are verified and reported with rdp (``verified_by``).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from accounting import closed_form, rdp
from accounting.accountants.base import ROUNDS_MAX, Accountant, rounds_result
from accounting.accountants.rdp import RdpAccountant, full_epsilon
from accounting.choices import AccountantName
from accounting.events import ApproximateDpEvent, PoissonSampledGaussian
from accounting.results import Calibration, EpsilonReport

_RDP = RdpAccountant()


class ClosedFormAccountant(Accountant):
    name: ClassVar[AccountantName] = "closed_form"
    verified_by: ClassVar[AccountantName] = _RDP.name
    per_round: ClassVar[AccountantName] = _RDP.name
    tabulated_by: ClassVar[AccountantName] = "closed_form"
    composes: ClassVar[bool] = False
    raw_formula: ClassVar[bool] = True
    supports: ClassVar[tuple[type[ApproximateDpEvent], ...]] = (PoissonSampledGaussian,)

    def epsilon(
        self, events: list[ApproximateDpEvent], delta: float, *, time_limit_s: float | None = None
    ) -> EpsilonReport:
        """The rdp epsilon (claimable), the formula's in ``estimate`` (docs/accounting.md §6.3)."""
        base = _RDP.epsilon(events, delta)
        (phase,) = events
        assert isinstance(phase, PoissonSampledGaussian)
        formula = closed_form.closed_form_epsilon(phase.sampling_rate, phase.noise_multiplier, phase.steps, delta)
        verdict = (
            "below the rdp bound, so not claimable here (docs/accounting.md §6.2)"
            if formula < base.epsilon
            else "above the rdp bound (the formula over-noises here)"
        )
        return base.model_copy(
            update={
                "accountant": self.name,
                "estimate": formula,
                "reason": f"closed form (the paper's bound) gives epsilon={formula:.6g}, {verdict}; "
                f"epsilon is the rdp value",
            }
        )

    def noise_multiplier(
        self,
        sampling_rate: float,
        rounds: int,
        target: float,
        delta: float,
        spent: list[ApproximateDpEvent],
        *,
        raw: bool = False,
        time_limit_s: float | None = None,
    ) -> Calibration:
        """The formula's sigma if rdp confirms it; else rdp's sigma (``replaced``), or the raw one (§6.2)."""
        q, t = sampling_rate, rounds
        sigma = closed_form.closed_form_sigma(q, t, target, delta)
        checked = full_epsilon(rdp.order_grid(), None, q, sigma, t, delta)
        if checked <= target:
            return Calibration(
                solved_for="noise_multiplier", sampling_rate=q, noise_multiplier=sigma, rounds=t, delta=delta,
                target_epsilon=target, epsilon=checked, accountant=self.name, accountant_used=self.name,
                reason=f"closed form; rdp confirms epsilon={checked:.6g} <= target",
            )
        if raw:
            return Calibration(
                solved_for="noise_multiplier", sampling_rate=q, noise_multiplier=sigma, rounds=t, delta=delta,
                target_epsilon=target, epsilon=checked, accountant=self.name, accountant_used=self.name, sound=False,
                reason=f"raw closed form: rdp gives epsilon={checked:.6g} > target; the formula under-noises "
                "here (docs/accounting.md §6.2)",
            )
        return self._replaced(
            _RDP.noise_multiplier(q, t, target, delta, []),
            f"closed form sigma={sigma:.6g} has rdp epsilon={checked:.6g} > target; replaced by the "
            "rdp-calibrated sigma",
        )

    def sampling_rate(
        self,
        noise_multiplier: float,
        rounds: int,
        target: float,
        delta: float,
        spent: list[ApproximateDpEvent],
        *,
        time_limit_s: float | None = None,
    ) -> Calibration:
        """The formula inverted for q (capped at 1), checked by rdp, replaced where it misses (§6.2)."""
        sigma, t = noise_multiplier, rounds
        formula = closed_form.closed_form_sampling_rate(sigma, t, target, delta)
        rate = min(1.0, formula)
        checked = full_epsilon(rdp.order_grid(), None, rate, sigma, t, delta)
        capped = " (the formula allows q > 1; capped at 1)" if formula > 1 else ""
        if checked <= target:
            return Calibration(
                solved_for="sampling_rate", sampling_rate=rate, noise_multiplier=sigma, rounds=t, delta=delta,
                target_epsilon=target, epsilon=checked, accountant=self.name, accountant_used=self.name,
                reason=f"closed form{capped}; rdp confirms epsilon={checked:.6g} <= target",
            )
        return self._replaced(
            _RDP.sampling_rate(sigma, t, target, delta, []),
            f"closed form sampling_rate={rate:.6g}{capped} has rdp epsilon={checked:.6g} > target; "
            "replaced by the rdp answer",
        )

    def rounds(
        self,
        sampling_rate: float,
        noise_multiplier: float,
        target: float,
        delta: float,
        spent: list[ApproximateDpEvent],
        *,
        time_limit_s: float | None = None,
    ) -> Calibration:
        """The formula's largest T, checked by rdp, replaced where it misses (§6.2)."""
        q, sigma = sampling_rate, noise_multiplier
        count = min(closed_form.closed_form_rounds(q, sigma, target, delta), ROUNDS_MAX)
        checked = full_epsilon(rdp.order_grid(), None, q, sigma, count, delta) if count else 0.0
        if checked <= target:
            result = rounds_result(count, q, sigma, delta, target, checked, self.name, self.name, None)
            note = "closed form" if count else result.reason
            return result.model_copy(update={"reason": f"{note}; rdp confirms epsilon={checked:.6g} <= target"})
        return self._replaced(
            _RDP.rounds(q, sigma, target, delta, []),
            f"closed form rounds={count} has rdp epsilon={checked:.6g} > target; replaced by the rdp answer",
        )

    def noise_slopes(self, epsilons: np.ndarray, rounds: int, delta: float) -> np.ndarray:
        """The formula's sigma / q (sigma is exactly linear in q), unchecked: for optimisation tables only."""
        return np.array([closed_form.closed_form_sigma(1.0, rounds, float(e), delta) for e in epsilons])

    def _replaced(self, answer: Calibration, reason: str) -> Calibration:
        """rdp's (sound) answer standing in for a formula value that misses its target."""
        return answer.model_copy(update={"accountant": self.name, "replaced": True, "reason": reason})
