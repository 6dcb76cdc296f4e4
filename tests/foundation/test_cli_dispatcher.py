"""The single `gdpfed` entry point maps every user error to one line and exit code 2."""

from __future__ import annotations

import subprocess
import sys
import types

import pydantic
import pytest

from accounting.errors import InfeasibleError, InvalidInputError
from app import cli


def _fake_module(handler):
    module = types.ModuleType("fake_cli")

    def register(subparsers):
        parser = subparsers.add_parser("fake")
        parser.add_argument("--value", type=int, required=True)
        parser.add_argument("--json", action="store_true")
        parser.set_defaults(handler=handler)

    module.register = register
    return module


@pytest.fixture
def fake_command(monkeypatch):
    def install(handler):
        monkeypatch.setitem(sys.modules, "fake_cli", _fake_module(handler))
        monkeypatch.setattr(cli, "SUBCOMMAND_MODULES", {"fake": "fake_cli"})

    return install


class _Point(pydantic.BaseModel):
    epsilon: float = pydantic.Field(gt=0)


@pytest.mark.parametrize(
    "error, expected",
    [
        (InvalidInputError("epsilon", "must be > 0"), "epsilon: must be > 0"),
        (InfeasibleError("K exceeds the population"), "K exceeds the population"),
    ],
)
def test_project_errors_are_one_line_exit_2(fake_command, capsys, error, expected):
    def handler(args):
        raise error

    fake_command(handler)
    assert cli.run(["fake", "--value", "1"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and expected in captured.err


def test_pydantic_errors_name_the_field(fake_command, capsys):
    def handler(args):
        _Point(epsilon=-1)

    fake_command(handler)
    assert cli.run(["fake", "--value", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "epsilon" in err and "greater than 0" in err


def test_usage_errors_are_one_line_exit_2(fake_command, capsys):
    fake_command(lambda args: None)
    with pytest.raises(SystemExit) as exit_info:
        cli.run(["fake", "--value", "not-a-number"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--value" in err


def test_json_output_is_the_data_and_text_is_the_text(fake_command, capsys):
    fake_command(lambda args: (_Point(epsilon=2.5), "epsilon is 2.5"))
    assert cli.run(["fake", "--value", "1", "--json"]) == 0
    assert pydantic.TypeAdapter(_Point).validate_json(capsys.readouterr().out).epsilon == 2.5
    assert cli.run(["fake", "--value", "1"]) == 0
    assert capsys.readouterr().out == "epsilon is 2.5\n"


def test_unavailable_subcommand_explains_itself(monkeypatch, capsys):
    monkeypatch.setattr(cli, "SUBCOMMAND_MODULES", {"ghost": "no_such_module_for_gdpfed"})
    assert cli.run(["ghost"]) == 2
    assert "unavailable" in capsys.readouterr().err


def test_installed_entry_point_prints_no_traceback_on_unknown_command():
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "no-such-command"], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1
