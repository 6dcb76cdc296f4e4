"""Run-config errors of a Flower run are worded as everywhere else (docs/flower.md §3):
the run-config key, then the message ``accounting.errors.validation_error_line`` gives the
command line and the service."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from accounting.errors import InvalidInputError
from app.cli import format_validation_error
from trainer.flower.settings import FlowerOptions, split_run_config, train_config


def test_a_bad_flower_option_is_named_by_its_key_with_the_shared_wording():
    fields = {"out-dir": "run", "min-nodes": "two", "wait-timeout": 0}
    with pytest.raises(ValidationError) as direct:
        FlowerOptions.model_validate(fields)
    with pytest.raises(InvalidInputError) as info:
        split_run_config(fields)
    assert (info.value.field, info.value.reason) == (
        "min-nodes", "Input should be a valid integer, unable to parse string as an integer (and 1 more)"
    )
    assert str(info.value) == format_validation_error(direct.value)  # the CLI's own line for the same error


def test_a_bad_training_setting_is_named_by_its_hyphenated_key():
    with pytest.raises(InvalidInputError) as info:
        train_config({"out-dir": "run", "dataset": "digits", "model": "mlp", "rounds": 1, "local-steps": 0})
    assert (info.value.field, info.value.reason) == ("local-steps", "Input should be greater than or equal to 1")
    with pytest.raises(InvalidInputError) as info:
        train_config({"out-dir": "run", "dataset": "digits", "model": "mlp", "rounds": 0, "server_lr": -1})
    assert (info.value.field, info.value.reason) == ("rounds", "Input should be greater than or equal to 1 (and 1 more)")
