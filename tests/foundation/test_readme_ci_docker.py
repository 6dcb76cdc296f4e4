"""The README's two commands are the contract: CI runs the second, Docker runs the first."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    """The commands of the README's first two fenced code blocks, in order."""
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M)
    return [block.strip() for block in blocks[:2]]


def test_readme_opens_with_two_one_line_commands():
    text = (ROOT / "README.md").read_text()
    before_first_block = text.split("```", 1)[0]
    # Only a title and a sentence or two may stand before the commands.
    assert len(before_first_block.strip().splitlines()) <= 6
    run_command, test_command = readme_commands()
    assert "\n" not in run_command and "\n" not in test_command
    assert run_command.startswith("pip install") and test_command.startswith("pip install")
    assert "pytest" in test_command


def test_ci_runs_the_readme_test_command_verbatim():
    _, test_command = readme_commands()
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert test_command in ci_lines
    # set -e makes a failing pytest fail CI.
    assert any(line.startswith("set -") and "e" in line.split()[1] for line in ci_lines if line.startswith("set -"))


def test_install_commands_pin_the_local_torch_build_only_with_the_trainer_extra():
    run_command, test_command = readme_commands()
    for command in (run_command, test_command):
        words = shlex.split(command.split("&&")[0])
        torch_requirements = [w for w in words if w.startswith("torch")]
        wants_trainer = any("trainer" in w for w in words)
        # An unpinned torch would pull CUDA wheels on this kind of machine.
        assert torch_requirements == (["torch==2.13.0"] if wants_trainer else [])
    pyproject = (ROOT / "pyproject.toml").read_text()
    core = pyproject.split("[project.optional-dependencies]")[0]
    assert "torch" not in core, "torch must stay out of the core dependencies"


def _dockerfile_instructions() -> list[tuple[str, str]]:
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    return [
        tuple(line.split(None, 1))  # type: ignore[misc]
        for line in lines
        if line.strip() and not line.lstrip().startswith("#")
    ]


def test_dockerfile_installs_and_starts_what_the_readme_documents():
    run_command, _ = readme_commands()
    install_part, start_part = [part.strip() for part in run_command.split("&&")]
    install_words = shlex.split(install_part)
    instructions = _dockerfile_instructions()

    runs = [arg for op, arg in instructions if op == "RUN"]
    assert any(arg.startswith("pip install") for arg in runs)
    docker_install = shlex.split(next(arg for arg in runs if arg.startswith("pip install")))
    # Same distribution (the repository root), same extras (none: the service needs no torch).
    readme_target = next(w for w in install_words[2:] if not w.startswith("-") or w == "-e")
    readme_target = install_words[install_words.index("-e") + 1] if "-e" in install_words else readme_target
    assert readme_target == "." and docker_install[-1] == "."

    cmd = json.loads(next(arg for op, arg in instructions if op == "CMD"))
    start_words = shlex.split(start_part)
    assert cmd[: len(start_words)] == start_words, (cmd, start_words)
    # The container must listen beyond its own loopback.
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0"

    copied = {arg.split()[0] for op, arg in instructions if op == "COPY"}
    for package in ("accounting", "planner", "app", "trainer"):
        assert package in copied
