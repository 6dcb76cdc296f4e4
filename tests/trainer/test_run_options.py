"""``gdpfed train``'s run options are ``TrainConfig``'s fields: the options, their choices
and the defaults the help states are read from the fields (``trainer/run/options.py``), and
the model and dataset names from ``trainer.choices``, the registries' one list. Torch-free."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import get_args

from trainer.choices import MODELS
from trainer.run.config import TrainConfig
from trainer.run.options import CONFIG_OPTIONS, JSON_OPTIONS, OPTION_FLAGS, add_run_options


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_run_options(parser)
    return parser


def _shown(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def test_every_config_field_is_an_option_with_its_choices_and_default() -> None:
    actions = {action.dest: action for action in _parser()._actions}
    fields = TrainConfig.model_fields
    assert set(CONFIG_OPTIONS) | set(JSON_OPTIONS) | {"secagg_workers"} == set(fields)
    for name in CONFIG_OPTIONS:
        action = actions[name]
        assert OPTION_FLAGS.get(name, "--" + name.replace("_", "-")) in action.option_strings
        values = get_args(fields[name].annotation)
        if values:
            assert action.choices is not None and tuple(action.choices) == values, name
        help_text = action.help or ""
        if "default" in help_text and not fields[name].is_required():
            assert f"default {_shown(fields[name].default)}" in help_text, name


def test_the_model_help_lists_every_model() -> None:
    """It said ``mlp, cnn, resnet18 or lstm`` while ``mean`` was registered too (and so did
    the README's gdpfed train synopsis)."""
    [model] = [action for action in _parser()._actions if action.dest == "model"]
    listed = (model.help or "").replace(" or ", ", ").split(", ")
    assert tuple(listed) == MODELS
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert f"--model {'|'.join(MODELS)}" in readme
