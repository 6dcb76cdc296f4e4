"""Bad input: every field, every bad kind, the field named in the error (docs §9)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import accounting
from accounting import InvalidInputError, Phase

BAD_NUMBERS = [math.nan, math.inf, -math.inf, True, "0.1", None]

GOOD = {"sampling_rate": 0.01, "noise_multiplier": 1.0, "rounds": 100, "epsilon": 1.0, "delta": 1e-5}

CALLS: dict[str, tuple[Callable[..., Any], tuple[str, ...]]] = {
    "epsilon": (accounting.epsilon, ("sampling_rate", "noise_multiplier", "rounds", "delta")),
    "noise_multiplier": (accounting.noise_multiplier, ("sampling_rate", "rounds", "epsilon", "delta")),
    "sampling_rate": (accounting.sampling_rate, ("noise_multiplier", "rounds", "epsilon", "delta")),
    "rounds": (accounting.rounds, ("sampling_rate", "noise_multiplier", "epsilon", "delta")),
    "closed_form": (accounting.closed_form_noise_multiplier, ("sampling_rate", "rounds", "epsilon", "delta")),
}

OUT_OF_DOMAIN = {
    "sampling_rate": [0.0, -0.1, 1.0000001, 2.0],
    # past 1e+-100 (docs §9): the square of 1e-300 underflows and of 1e200 overflows, which the
    # accountants' formulas divided by or raised (a traceback, an HTTP 500)
    "noise_multiplier": [0.0, -1.0, 1e-300, 1e200],
    "rounds": [0, -5, 2.5, 100.0],
    "epsilon": [0.0, -1.0],
    "delta": [0.0, 1.0, -1e-5, 1.5],
}


def _cases() -> list[tuple[str, str, Any]]:
    out = []
    for name, (_, fields) in CALLS.items():
        for field in fields:
            for bad in [*BAD_NUMBERS, *OUT_OF_DOMAIN[field]]:
                out.append((name, field, bad))
    return out


@pytest.mark.parametrize(("name", "field", "bad"), _cases())
def test_every_field_every_bad_kind_is_named(name: str, field: str, bad: Any) -> None:
    fn, fields = CALLS[name]
    args = [bad if f == field else GOOD[f] for f in fields]
    with pytest.raises(InvalidInputError) as error:
        fn(*args)
    assert error.value.field == field
    assert error.value.message.startswith(f"{field}: ")


@pytest.mark.parametrize("name", ["epsilon", "noise_multiplier", "sampling_rate", "rounds"])
def test_unknown_accountant(name: str) -> None:
    fn, fields = CALLS[name]
    with pytest.raises(InvalidInputError) as error:
        fn(*[GOOD[f] for f in fields], accountant="moments")
    assert error.value.field == "accountant"


@pytest.mark.parametrize(
    ("phase", "field"),
    [
        ({"sampling_rate": 0.1, "noise_multiplier": 1.0, "steps": 0}, "spent[1].steps"),
        ({"sampling_rate": 0.1, "noise_multiplier": 1.0, "steps": True}, "spent[1].steps"),
        ({"sampling_rate": 1.5, "noise_multiplier": 1.0, "steps": 3}, "spent[1].sampling_rate"),
        ({"sampling_rate": 0.1, "noise_multiplier": math.nan, "steps": 3}, "spent[1].noise_multiplier"),
        ({"sampling_rate": 0.1, "noise_multiplier": 1.0}, "spent[1].steps"),
        ({"sampling_rate": 0.1, "noise_multiplier": 1.0, "steps": 3, "extra": 1}, "spent[1].extra"),
    ],
)
def test_spent_phases_are_validated_with_their_index(phase: dict[str, Any], field: str) -> None:
    good = Phase(sampling_rate=0.1, noise_multiplier=1.0, steps=2)
    for fn, args in [
        (accounting.rounds, (0.01, 1.0, 5.0, 1e-5)),
        (accounting.noise_multiplier, (0.01, 10, 5.0, 1e-5)),
        (accounting.sampling_rate, (1.0, 10, 5.0, 1e-5)),
    ]:
        with pytest.raises(InvalidInputError) as error:
            fn(*args, spent=[good, phase])
        assert error.value.field == field


def test_phases_list_itself() -> None:
    with pytest.raises(InvalidInputError) as error:
        accounting.epsilon_of_phases([], 1e-5)
    assert error.value.field == "events"
    with pytest.raises(InvalidInputError) as error:
        accounting.epsilon_of_phases("abc", 1e-5)  # type: ignore[arg-type]
    assert error.value.field == "events"


def test_phase_model_rejects_bad_values() -> None:
    import pydantic

    for kwargs in [
        {"sampling_rate": 0, "noise_multiplier": 1, "steps": 1},
        {"sampling_rate": 0.1, "noise_multiplier": math.inf, "steps": 1},
        {"sampling_rate": True, "noise_multiplier": 1, "steps": 1},
    ]:
        with pytest.raises(pydantic.ValidationError):
            Phase(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"sampling_rates": np.array([0.1, np.nan])}, "sampling_rates"),
        ({"sampling_rates": np.array([0.0])}, "sampling_rates"),
        ({"sampling_rates": np.array([True])}, "sampling_rates"),
        ({"epsilons": np.array([-1.0])}, "epsilons"),
        ({"epsilons": np.array([np.inf])}, "epsilons"),
        ({"rounds": 0}, "rounds"),
        ({"delta": 1.0}, "delta"),
    ],
)
def test_batch_validation(kwargs: dict[str, Any], field: str) -> None:
    args = {"sampling_rates": np.array([0.1]), "rounds": 10, "epsilons": np.array([1.0]), "delta": 1e-5, **kwargs}
    with pytest.raises(InvalidInputError) as error:
        accounting.noise_multipliers_rdp(**args)
    assert error.value.field == field


def test_raw_must_be_a_bool() -> None:
    with pytest.raises(InvalidInputError) as error:
        accounting.noise_multiplier(0.1, 10, 1.0, 1e-5, "closed_form", raw=1)  # type: ignore[arg-type]
    assert error.value.field == "raw"


def test_nan_in_a_bounded_float_of_an_input_model_is_not_a_finite_number() -> None:
    """Every bounded float of an InputModel (training and Flower options, configs) says NaN is not
    finite, where pydantic said 'Input should be greater than 0'; inf stays the bounds' matter."""
    import pydantic

    from accounting.validation import InputModel

    class Options(InputModel):
        rate: float = pydantic.Field(1.0, gt=0)
        share: float | None = pydantic.Field(None, gt=0, le=1)
        free: float = 0.0

    for field in ("rate", "share"):
        with pytest.raises(pydantic.ValidationError) as caught:
            Options.model_validate({field: "nan"})
        (error,) = caught.value.errors(include_url=False)
        assert error["loc"] == (field,) and "must be a finite number" in error["msg"], error
    assert Options(rate=float("inf")).rate == float("inf")  # admitted before and still
    assert math.isnan(Options(free=float("nan")).free)  # an unbounded float is not touched
