"""``gdpfed audit discrete`` (docs/secure-aggregation.md §Audit): the verdict, JSON, and bad input."""

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
