"""A secure-aggregation graph (``full``/``sparse``) and what a run may ask for (those or
``auto``) are each one ``Literal``, ``planner.schema.SecaggMode`` and ``RequestedSecagg``,
below the planner, the trainer, the service's document and the bench (issue 31): a copy
could gain a mode the others refuse. Torch-free: the source is read, not imported.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

from planner.schema import RequestedSecagg, SecaggMode

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("accounting", "planner", "app", "trainer", "bench")
# a Literal, tuple or list spelling out the graph modes: "full", then "sparse"
SPELLED = re.compile(r"""[\[(]\s*["']full["']\s*,\s*["']sparse["']""")


def test_the_graph_modes_are_spelled_out_once() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {line.strip()}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for line in path.read_text().splitlines()
        if SPELLED.search(line)
    ]
    # the definition, and the parser's copy (tested equal below)
    assert found == [
        'planner/schema.py: SecaggMode = Literal["full", "sparse"]',
        'trainer/run/options.py: SECAGG_CHOICES = ("full", "sparse", "auto")',
    ]
    assert get_args(SecaggMode) == ("full", "sparse")
    assert get_args(RequestedSecagg) == ("full", "sparse", "auto")


def test_the_train_parser_offers_the_requested_modes() -> None:
    # trainer/run/options.py builds the parser without pydantic, so it keeps its own copy
    from trainer.run.options import SECAGG_CHOICES

    assert SECAGG_CHOICES == get_args(RequestedSecagg)
