"""CI proves the fresh-machine path: ``.ci/run`` builds a new virtual environment in a
temporary directory and runs the README's test command inside it, verbatim."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL)][:2]


def test_ci_runs_the_readme_test_command_in_a_fresh_venv() -> None:
    script = (REPO / ".ci" / "run").read_text()
    test_command = _readme_commands()[1]
    lines = [line.strip() for line in script.splitlines()]
    assert test_command in lines, test_command
    assert "set -euo pipefail" in lines  # a failing test command fails CI
    venv = lines.index('python3 -m venv "$VENV"')
    activate = lines.index('source "$VENV/bin/activate"')
    assert any(line.startswith('VENV="$(mktemp -d') for line in lines[:venv])
    assert venv < activate < lines.index(test_command)


def test_readme_starts_with_the_two_commands() -> None:
    text = (REPO / "README.md").read_text()
    first_block = text.index("```bash")
    assert "##" not in text[text.index("\n", text.index("# gdpfed")):first_block]  # nothing before them but the intro
    install_and_run, install_and_test = _readme_commands()
    assert install_and_run.startswith("pip install") and install_and_test.startswith("pip install")
    assert "pytest" in install_and_test


def test_ci_provides_postgres_and_chromium_to_the_tests() -> None:
    """Issue 15: the service tests run on a real PostgreSQL server and the console in a real
    browser in CI; without these the tests would skip and CI would prove nothing about them."""
    script = (REPO / ".ci" / "run").read_text()
    lines = [line.strip() for line in script.splitlines()]
    test_command = _readme_commands()[1]
    assert "source .ci/postgres" in lines
    start = next(i for i, line in enumerate(lines) if "start_test_postgres" in line and not line.startswith("#"))
    assert start < lines.index(test_command)
    assert any("stop_test_postgres" in line for line in lines if line.startswith("trap "))
    for package in ("postgresql", "chromium", "chromium-driver"):
        assert f"missing+=({package})" in script, package
    assert any(line.startswith("DEBIAN_FRONTEND=noninteractive apt-get install") for line in lines)
    helper = (REPO / ".ci" / "postgres").read_text()
    assert "export GDPFED_TEST_POSTGRES_URL" in helper and "127.0.0.1" in helper and "initdb" in helper


def test_ci_run_does_not_skip_the_postgres_tests() -> None:
    """Under CI (CI=true, as .ci/run's harness sets it) the PostgreSQL server that .ci/run
    started must be visible to the tests; a run by hand without it is not CI and passes."""
    import os

    in_ci = os.environ.get("CI") == "true"
    url = os.environ.get("GDPFED_TEST_POSTGRES_URL", "")
    assert not in_ci or url.startswith("postgresql://"), "CI=true but .ci/run's PostgreSQL URL did not reach the tests"


def test_ci_runs_ruff_and_mypy_after_the_tests() -> None:
    """Issue 10: CI runs ruff and mypy (configured in pyproject.toml) and fails on findings."""
    lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    test_command = _readme_commands()[1]
    assert lines.index(test_command) < lines.index("ruff check .") and lines.index(test_command) < lines.index("mypy")
    pyproject = (REPO / "pyproject.toml").read_text()
    assert "[tool.ruff" in pyproject and "[tool.mypy]" in pyproject and "pydantic.mypy" in pyproject


def test_ci_provides_the_openapi_client_generator_to_the_tests() -> None:
    """Issue 31: tests/app/test_generated_client.py generates a client with openapi-python-client
    0.29.1 from a venv of its own (its ruff is newer than the dev pin); in CI it must run, not skip."""
    lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    test_command = _readme_commands()[1]
    install = lines.index('"$GENERATOR_VENV/bin/pip" install -q "openapi-python-client==0.29.1"')
    export = lines.index('export GDPFED_OPENAPI_GENERATOR="$GENERATOR_VENV/bin/openapi-python-client"')
    assert lines.index('python3 -m venv "$GENERATOR_VENV"') < install < export < lines.index(test_command)
    assert any('"$GENERATOR_VENV"' in line for line in lines if line.startswith("trap "))
