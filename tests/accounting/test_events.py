"""Privacy events: v1 phases, zCDP, metric leakage, compositions (docs/accounting.md §11)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import accounting
from accounting import (
    ComposedEvent,
    InvalidInputError,
    MetricLeakage,
    Phase,
    PoissonSampledGaussian,
    ZeroConcentratedDp,
)
from accounting.accountants import ACCOUNTANTS, DEFAULT_ACCOUNTANT
from accounting.events import EVENT_KINDS, PoissonSampledSkellam, validate_events
from accounting.requests import EpsilonRequest, NoiseMultiplierRequest, answer

V1_PHASE = {"sampling_rate": 0.02, "noise_multiplier": 1.1, "steps": 30}


def test_a_schema_v1_phase_loads_as_the_sampled_gaussian_and_dumps_unchanged() -> None:
    (event,) = validate_events([V1_PHASE], "phases")
    assert type(event) is PoissonSampledGaussian and Phase is PoissonSampledGaussian
    assert event.kind == "poisson_sampled_gaussian"
    assert json.loads(event.model_dump_json()) == V1_PHASE  # no "kind" written
    tagged = validate_events([{**V1_PHASE, "kind": "poisson_sampled_gaussian"}], "phases")
    assert tagged == [event]
    assert Phase.model_validate(V1_PHASE) == event


def test_an_unknown_kind_is_refused_naming_the_element() -> None:
    with pytest.raises(InvalidInputError) as error:
        validate_events([V1_PHASE, {"kind": "moments", "rho": 1.0}], "spent")
    assert error.value.field == "spent[1]" and "kind must be one of" in error.value.message


def test_every_registered_kind_round_trips_through_json() -> None:
    examples = [
        PoissonSampledGaussian(**V1_PHASE),
        ZeroConcentratedDp(rho=0.01, steps=3),
        MetricLeakage(leakage_per_participation=0.4, participations=2),
        PoissonSampledSkellam(sampling_rate=0.1, variance=1e4, l2_sensitivity=30.0, l1_sensitivity=90.0, steps=4),
    ]
    assert {type(e) for e in examples} == set(EVENT_KINDS.values())
    for event in examples:
        assert validate_events([json.loads(event.model_dump_json())], "events") == [event]


def _dp_accounting_epsilon(events: list[Any], delta: float) -> float:
    """Google dp-accounting's RdpAccountant on our order grid, composing the same events."""
    import dp_accounting

    reference = dp_accounting.rdp.RdpAccountant(list(accounting.rdp.default_orders()))
    for event in events:
        if isinstance(event, ZeroConcentratedDp):
            reference.compose(dp_accounting.ZCDpEvent(event.rho), event.steps)
        else:
            sampled = dp_accounting.PoissonSampledDpEvent(
                event.sampling_rate, dp_accounting.GaussianDpEvent(event.noise_multiplier)
            )
            reference.compose(sampled, event.steps)
    return float(reference.get_epsilon(delta))


def test_zcdp_and_mixed_histories_match_dp_accounting_on_seeded_cases() -> None:
    rng = np.random.default_rng(7)
    for index in range(20):
        zcdp = ZeroConcentratedDp(rho=float(10 ** rng.uniform(-5, -1)), steps=int(rng.integers(1, 500)))
        phase = PoissonSampledGaussian(
            sampling_rate=float(10 ** rng.uniform(-2.5, -0.5)),
            noise_multiplier=float(rng.uniform(0.8, 5.0)),
            steps=int(rng.integers(1, 1000)),
        )
        delta = float(10 ** rng.uniform(-7, -3))
        # dp-accounting's sampled Gaussian is slow (a Python loop per order): 4 mixed cases
        for events in ([zcdp], [phase, zcdp]) if index < 4 else ([zcdp],):
            ours = accounting.epsilon_of_events(events, delta).epsilon
            assert ours == pytest.approx(_dp_accounting_epsilon(events, delta), rel=5e-3), (events, delta)


def test_zcdp_curve_is_alpha_rho_steps_and_the_exponential_mechanism_is_eps_squared_over_8() -> None:
    grid = accounting.rdp.order_grid()
    event = ZeroConcentratedDp.exponential_mechanism(0.06, selections=25)
    assert event.rho == pytest.approx(0.06**2 / 8) and event.steps == 25
    assert np.allclose(event.rdp(grid), grid.orders * 0.06**2 / 8 * 25)
    with pytest.raises(InvalidInputError) as error:
        ZeroConcentratedDp.exponential_mechanism(0.0)
    assert error.value.field == "epsilon"


def test_calibration_accounts_for_a_spent_zcdp_event() -> None:
    selection = ZeroConcentratedDp.exponential_mechanism(0.1, selections=100)
    alone = accounting.noise_multiplier(0.05, 200, 3.0, 1e-5)
    with_selection = accounting.noise_multiplier(0.05, 200, 3.0, 1e-5, spent=[selection])
    assert with_selection.noise_multiplier > alone.noise_multiplier
    phase = PoissonSampledGaussian(sampling_rate=0.05, noise_multiplier=with_selection.noise_multiplier, steps=200)
    assert accounting.epsilon_of_events([selection, phase], 1e-5).epsilon <= 3.0
    assert with_selection.spent_epsilon == pytest.approx(accounting.epsilon_of_events([selection], 1e-5).epsilon)


def test_metric_leakage_adds_up_and_is_kept_apart() -> None:
    # docs/accounting.md §11.4: n = 2, nu = 5 leaks 0.4 per participation, summed.
    per = MetricLeakage.laplace(model_dim=2, noise_multiplier=5.0)
    assert per.leakage() == pytest.approx(0.4)
    history = [MetricLeakage.laplace(2, 5.0, participations=3), per]
    assert accounting.metric_leakage(history) == pytest.approx(1.6)
    assert accounting.metric_leakage(ComposedEvent(history)) == pytest.approx(1.6)
    assert accounting.metric_leakage([]) == 0.0
    with pytest.raises(InvalidInputError) as error:
        accounting.metric_leakage([per, PoissonSampledGaussian(**V1_PHASE)])
    assert error.value.field == "events[1]" and "never added together" in error.value.message


@pytest.mark.parametrize("name", list(ACCOUNTANTS))
def test_every_accountant_refuses_to_fold_metric_leakage_into_epsilon(name: str) -> None:
    leak = MetricLeakage(leakage_per_participation=0.4, participations=3)
    with pytest.raises(InvalidInputError) as error:
        accounting.epsilon_of_events([leak], 1e-5, name)
    assert error.value.field == "events[0]" and "different privacy notion" in error.value.message
    for question, args in [
        (accounting.noise_multiplier, (0.05, 10, 2.0, 1e-5)),
        (accounting.sampling_rate, (2.0, 10, 2.0, 1e-5)),
        (accounting.rounds, (0.05, 2.0, 2.0, 1e-5)),
    ]:
        with pytest.raises(InvalidInputError) as error:
            question(*args, name, spent=[leak])
        assert error.value.field == "spent[0]" and "metric" in error.value.message


def test_a_composition_never_mixes_notions_and_flattens() -> None:
    phase = PoissonSampledGaussian(**V1_PHASE)
    zcdp = ZeroConcentratedDp(rho=0.001, steps=4)
    with pytest.raises(InvalidInputError) as error:
        ComposedEvent([phase, MetricLeakage(leakage_per_participation=1.0, participations=1)])
    assert "never composed together" in error.value.message
    nested = ComposedEvent([phase, ComposedEvent([zcdp, phase])])
    assert nested.events == (phase, zcdp, phase) and nested.notion == "approximate_dp"
    assert accounting.epsilon_of_events(nested, 1e-5).epsilon == accounting.epsilon_of_events(
        [phase, zcdp, phase], 1e-5
    ).epsilon


@pytest.mark.parametrize(
    "name", [name for name, a in ACCOUNTANTS.items() if not issubclass(ZeroConcentratedDp, a.supports)]
)
def test_an_accountant_refuses_a_kind_it_does_not_support(name: str) -> None:
    with pytest.raises(InvalidInputError) as error:
        accounting.epsilon_of_events([ZeroConcentratedDp(rho=0.01, steps=1)], 1e-5, name)
    assert error.value.field == "events[0]" and "does not support zcdp" in error.value.message


def test_requests_take_tagged_events_in_spent_and_name_bad_ones() -> None:
    body = {"sampling_rate": 0.05, "noise_multiplier": 1.5, "rounds": 100, "delta": 1e-5,
            "spent": [V1_PHASE, {"kind": "zcdp", "rho": 0.001, "steps": 10}]}
    expected = accounting.epsilon_of_events(
        [PoissonSampledGaussian(**V1_PHASE), ZeroConcentratedDp(rho=0.001, steps=10),
         PoissonSampledGaussian(sampling_rate=0.05, noise_multiplier=1.5, steps=100)], 1e-5, DEFAULT_ACCOUNTANT
    )  # a request's default accountant (pld: a zCDP event is answered by rdp, marked)
    assert answer(EpsilonRequest.model_validate(body)) == expected
    leak = {"kind": "metric_leakage", "leakage_per_participation": 0.4, "participations": 1}
    with pytest.raises(InvalidInputError) as error:
        answer(NoiseMultiplierRequest.model_validate(
            {"sampling_rate": 0.05, "rounds": 100, "epsilon": 5.0, "delta": 1e-5, "spent": [leak]}
        ))
    assert error.value.field == "spent[0]"
