"""Fixtures shared by the trainer's data and engine tests: the plays file and a tiny play."""

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def shakespeare_path() -> Path:
    """The shared public-domain plays file, beside the clone as in CI (../shared/data)."""
    path = REPO_ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
    if not path.is_file():
        pytest.skip(f"{path} is absent (CI provides ../shared beside the clone)")
    return path


TINY_PLAY = """First Citizen:
Before we proceed any further, hear me speak.

All:
Speak, speak.

First Citizen:
You are all resolved rather to die than to famish?
Resolved, resolved. 'Tis most certain: aye.

Second Citizen:
One word, good citizens.

Stage direction without a speaker line
that must be ignored.

All:
We know't, we know't.
"""


@pytest.fixture
def tiny_play(tmp_path: Path) -> Path:
    path = tmp_path / "play.txt"
    path.write_text(TINY_PLAY, encoding="utf-8")
    return path
