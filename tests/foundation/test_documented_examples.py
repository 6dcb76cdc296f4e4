"""Every example in ``examples/`` plans and trains on bundled data from a documented command.

A documented command is a ``$ gdpfed ...`` line (``\\`` continues it) of a ```` ```console ````
block in README.md or docs/*.md. A block that names a file of ``examples/`` is run here
as a new user would run it: its commands in order, each a ``gdpfed`` process, in a fresh
directory holding ``examples/`` (so ``--out runs/x`` and ``--out plan.json`` land there
and a later command of the block reads them); each must exit 0. ``gdpfed train`` is given
``--rounds 1`` (its documented flag: rounds to run, never more than the plan's) instead of
any ``--rounds`` it had, so the block runs in seconds; ``GDPFED_FULL=1`` runs the
commands exactly as written (slow). A training command that plans from a scenario must
not replace the scenario's ``model_dim`` unless the docs say it does.

The README's silo example once planned 2,000-example silos that ``rotated_digits`` cannot
hold (1,437) and documented no ``gdpfed train`` for them; no FedHDP or metric example
existed (issue 25 §5). ``test_every_example_is_used_by_a_documented_command`` keeps each
file of ``examples/`` in some run block.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CONSOLE = re.compile(r"^```console\n(.*?)^```", re.MULTILINE | re.DOTALL)
FULL = os.environ.get("GDPFED_FULL") == "1"
# Scenarios whose model_dim the docs say the training command replaces (planner-sized files).
MODEL_DIM_REPLACED = ("examples/scenario.yaml",)


def console_commands(text: str) -> list[list[list[str]]]:
    """The ``gdpfed`` argument lists of each console block of ``text``, block by block."""
    blocks = []
    for body in CONSOLE.findall(text):
        lines = body.replace("\\\n", " ").splitlines()
        blocks.append([shlex.split(line[2:])[1:] for line in lines if line.startswith("$ gdpfed ")])
    return blocks


def uses_examples(block: list[list[str]]) -> bool:
    return any(word.startswith("examples/") for argv in block for word in argv)


def documented_blocks() -> dict[str, list[list[str]]]:
    """``page:ordinal`` -> the commands of each console block that uses ``examples/`` (a
    block that appears twice, word for word, is run once)."""
    found: dict[str, list[list[str]]] = {}
    for page in PAGES:
        for ordinal, block in enumerate(console_commands(page.read_text(encoding="utf-8")), 1):
            if uses_examples(block) and block not in found.values():
                found[f"{page.relative_to(ROOT)}:{ordinal}"] = block
    return found


def shortened(argv: list[str]) -> list[str]:
    """A ``gdpfed train`` command with ``--rounds 1`` in place of any ``--rounds N``."""
    if FULL or argv[:1] != ["train"]:
        return argv
    kept, skip = [], False
    for word in argv:
        if skip:
            skip = False
            continue
        if word == "--rounds":
            skip = True
            continue
        if not word.startswith("--rounds="):
            kept.append(word)
    return [*kept, "--rounds", "1"]


BLOCKS = documented_blocks()


def test_the_docs_document_runs_of_the_examples() -> None:
    # Guards the extraction: the README's silo, FedHDP and metric blocks at least.
    assert len(BLOCKS) >= 6, sorted(BLOCKS)
    assert any(argv[:1] == ["train"] and "rotated_digits" in argv for block in BLOCKS.values() for argv in block)


def test_console_commands_join_continuations_and_skip_output() -> None:
    text = "```console\n$ gdpfed plan examples/a.json \\\n    --json\n{\n$ echo no\n```\n"
    assert console_commands(text) == [[["plan", "examples/a.json", "--json"]]]
    assert shortened(["train", "--plan", "p.json", "--rounds", "20", "--out", "r"]) == (
        ["train", "--plan", "p.json", "--rounds", "20", "--out", "r"] if FULL
        else ["train", "--plan", "p.json", "--out", "r", "--rounds", "1"]
    )


def test_every_example_is_used_by_a_documented_command() -> None:
    used = {word for block in BLOCKS.values() for argv in block for word in argv if word.startswith("examples/")}
    files = {f"examples/{path.name}" for path in (ROOT / "examples").iterdir() if path.is_file()}
    assert files - used == set(), "examples without a documented command that runs them"
    assert used - files == set(), "documented commands name examples that do not exist"


def test_every_documented_command_on_an_example_is_in_a_console_block() -> None:
    """A ``$ gdpfed`` line naming ``examples/`` outside a console block would never be run here."""
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        outside = CONSOLE.sub("", text)
        stray = [line for line in outside.splitlines() if line.startswith("$ gdpfed ") and "examples/" in line]
        assert not stray, f"{page.relative_to(ROOT)}: make these ```console blocks: {stray}"


def gdpfed(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    code = "import sys; from app.cli import main; main(sys.argv[1:])"
    return subprocess.run([sys.executable, "-c", code, *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=None if FULL else 540)


@pytest.mark.parametrize("where", sorted(BLOCKS))
def test_documented_example_commands_run(where: str, tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the trainer extra is not installed")
    (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    for argv in BLOCKS[where]:
        command = shortened(argv)
        result = gdpfed(command, tmp_path)
        shown = f"`gdpfed {shlex.join(command)}` ({where})"
        assert result.returncode == 0, f"{shown} exited {result.returncode}:\n{result.stderr[-3000:]}"
        if argv[:1] == ["train"] and "--scenario" in argv and argv[argv.index("--scenario") + 1] not in MODEL_DIM_REPLACED:
            assert "model_dim" not in result.stderr, f"{shown}: the example's model_dim is not the model's:\n{result.stderr}"
