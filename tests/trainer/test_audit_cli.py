"""``gdpfed audit MECHANISM`` (docs/secure-aggregation.md §Audit): the verdict, JSON, and bad input."""

from __future__ import annotations

import json

import pytest

from app.cli import run


def test_the_audit_reports_consistent_and_catches_a_broken_pipeline(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["audit", "discrete", "--runs", "20000", "--json"]) == 0
    sound = json.loads(capsys.readouterr().out)
    assert sound["violated"] is False and 0 < sound["epsilon_lower_bound"] < sound["accounted_epsilon"]
    assert run(["audit", "discrete", "--runs", "20000", "--noise-std-factor", "0.3", "--unconditioned"]) == 0
    out = capsys.readouterr().out
    assert "VIOLATED" in out and "accounted epsilon" in out


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--runs", "2"], "runs"),
        (["--delta", "1.5"], "delta"),
        (["--scale", "nan"], "scale"),
        (["--clients", "x"], "clients"),
    ],
)
def test_bad_input_is_one_line_naming_the_field(
    argv: list[str], field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["audit", "discrete", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"gdpfed audit: error: {field}:") and "Traceback" not in err


def test_every_option_has_help_that_states_its_default() -> None:
    """``gdpfed audit discrete --help`` says what each option sets and its default (it listed
    bare names, ``--share-variance SHARE_VARIANCE``, with nothing to tell a user what they are)."""
    import argparse

    from trainer.audit_cli import AuditRequest, register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    audit = next(a for a in parser._subparsers._group_actions[0].choices.values())  # type: ignore[union-attr]
    for action in audit._actions:
        if action.option_strings and action.dest not in ("help",):
            assert action.help, action.option_strings
            field = AuditRequest.model_fields.get(action.dest)
            if field is not None and action.dest != "noise_std_factor":
                shown = f"{field.default:g}".replace("e-05", "e-5")
                assert f"default {action.default}" in action.help or f"default {shown}" in action.help, action.help


@pytest.mark.parametrize("mechanism", ["client", "silo", "metric"])
def test_each_unit_audit_runs_from_the_command_line_and_catches_halved_noise(
    mechanism: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["audit", mechanism, "--runs", "4000", "--json"]) == 0
    sound = json.loads(capsys.readouterr().out)
    assert sound["mechanism"] == mechanism and sound["violated"] is False
    assert 0 < sound["epsilon_lower_bound"] < sound["accounted_epsilon"]
    assert run(["audit", mechanism, "--runs", "4000", "--noise-std-factor", "0.3"]) == 0
    assert "VIOLATED" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["client", "--scale", "4"], "--scale"),
        (["metric", "--unconditioned"], "--unconditioned"),
        (["silo", "--runs", "3"], "runs"),
        (["client", "--noise-std-factor", "inf"], "noise_std_factor"),
    ],
)
def test_a_unit_audit_refuses_bad_input_and_discrete_options_in_one_line(
    argv: list[str], field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["audit", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"gdpfed audit: error: {field}:") and "Traceback" not in err


@pytest.mark.parametrize(("mechanism", "label"), [
    ("client", "accounted epsilon {:.4g} (client-level, accountant pld)"),
    ("silo", "accounted epsilon {:.4g} (silo sample-level, accountant pld)"),
    ("metric", "accounted leakage {:.4g} (leakage (metric d-privacy), added up: no accountant)"),
])
def test_the_accounted_figure_states_its_accountant_and_notion(
    mechanism: str, label: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``gdpfed audit client|silo`` printed 'accounted epsilon 3.139' with no accountant and no
    notion (client-level and silo sample-level epsilons read the same); only discrete named its
    accountant. Each line now states both, and so does the JSON (accounting.audit.audit_text)."""
    assert run(["audit", mechanism, "--runs", "40", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert run(["audit", mechanism, "--runs", "40"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"audit {mechanism}: " + label.format(data["accounted_epsilon"]) + ", audited lower bound ")
    assert data["notion"] in out and data["accountant"] == ("pld" if mechanism != "metric" else None)
