"""The paper's closed form: the facts of design/accounting.md and the soundness policy (docs §6)."""

from __future__ import annotations

import pytest

import accounting
from accounting import InvalidInputError, Phase
from accounting.calibration import ROUNDS_MAX


def test_formula_over_noises_where_valid() -> None:
    raw = accounting.closed_form_noise_multiplier(0.1, 100, 1.0, 1e-3)
    assert raw == pytest.approx(10.18, abs=0.01)
    assert accounting.noise_multiplier(0.1, 100, 1.0, 1e-3).noise_multiplier == pytest.approx(3.10, abs=0.01)
    checked = accounting.noise_multiplier(0.1, 100, 1.0, 1e-3, accountant="closed_form")
    assert checked.sound and checked.noise_multiplier == pytest.approx(raw)
    assert checked.accountant_used == "closed_form" and checked.epsilon <= 1.0


def test_formula_under_noises_outside_its_conditions_and_is_replaced() -> None:
    raw = accounting.closed_form_noise_multiplier(0.1, 1, 2.0, 1e-3)
    assert raw == pytest.approx(0.526, abs=1e-3)
    assert accounting.epsilon(0.1, raw, 1, 1e-3).epsilon == pytest.approx(4.3, abs=0.05)

    replaced = accounting.noise_multiplier(0.1, 1, 2.0, 1e-3, accountant="closed_form")
    assert replaced.replaced and replaced.accountant_used == "rdp" and "replaced" in replaced.reason
    assert replaced.sound  # the value returned is rdp's, which meets the target
    assert replaced.noise_multiplier == pytest.approx(accounting.noise_multiplier(0.1, 1, 2.0, 1e-3).noise_multiplier)
    assert replaced.epsilon <= 2.0

    kept = accounting.noise_multiplier(0.1, 1, 2.0, 1e-3, accountant="closed_form", raw=True)
    assert not kept.sound and not kept.replaced and kept.noise_multiplier == pytest.approx(raw)
    assert kept.epsilon > 2.0  # honest: the claimable epsilon of the raw sigma


def test_raw_is_only_for_closed_form() -> None:
    with pytest.raises(InvalidInputError) as error:
        accounting.noise_multiplier(0.1, 1, 2.0, 1e-3, raw=True)
    assert error.value.field == "raw"


def test_epsilon_report_keeps_the_formula_as_estimate_and_claims_rdp() -> None:
    report = accounting.epsilon(0.1, 0.526, 1, 1e-3, accountant="closed_form")
    assert report.estimate == pytest.approx(2.0, rel=1e-2)
    assert report.epsilon == pytest.approx(accounting.epsilon(0.1, 0.526, 1, 1e-3).epsilon)
    assert report.accountant == "closed_form" and report.accountant_used == "rdp"
    assert "not claimable" in report.reason


def test_closed_form_sampling_rate_and_rounds_are_checked() -> None:
    rate = accounting.sampling_rate(10.18, 100, 1.0, 1e-3, accountant="closed_form")
    assert rate.sound and rate.sampling_rate == pytest.approx(0.1, rel=1e-3)
    rounds = accounting.rounds(0.1, 10.18, 1.0, 1e-3, accountant="closed_form")
    assert rounds.sound and rounds.rounds == 99 or rounds.rounds == 100
    replaced = accounting.rounds(0.1, 0.53, 2.0, 1e-3, accountant="closed_form")
    assert replaced.replaced and replaced.sound and replaced.epsilon <= 2.0


def test_closed_form_refuses_histories() -> None:
    with pytest.raises(InvalidInputError) as error:
        accounting.noise_multiplier(
            0.1, 10, 1.0, 1e-3, accountant="closed_form", spent=[Phase(sampling_rate=0.1, noise_multiplier=1, steps=1)]
        )
    assert error.value.field == "spent"
    phase = Phase(sampling_rate=0.1, noise_multiplier=1, steps=1)
    with pytest.raises(InvalidInputError):
        accounting.epsilon_of_phases([phase, phase], 1e-3, accountant="closed_form")


def test_the_formulas_rounds_at_a_rate_whose_square_underflows_are_capped() -> None:
    """q = 1e-300: q^2 is 0.0 and the formula's round count divided by it (ZeroDivisionError);
    q = 1e-160 at sigma 1e100 overflows it to inf (OverflowError converting it to an int). The
    formula then bounds no count: the search's cap, checked by rdp like any other answer."""
    for q, sigma in ((1e-300, 1.0), (1e-160, 1e100)):
        answer = accounting.rounds(q, sigma, 1.0, 1e-5, accountant="closed_form")
        assert answer.rounds == ROUNDS_MAX and answer.epsilon <= 1.0
