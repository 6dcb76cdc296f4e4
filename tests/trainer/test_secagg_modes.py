"""A secure-aggregation graph (``full``/``sparse``) and what a run may ask for (those or
``auto``) are each one ``Literal``, ``accounting.choices.SecaggMode`` and ``RequestedSecagg``
(re-exported by ``planner.schema``), below the planner, the trainer's parser and config,
the service's document and the bench (issues 31, 28): a copy could gain a mode the others
refuse. So is how a round's secure aggregation executes (``protocol``/``exact_sum``,
``trainer.choices.SecAggExecution``). Torch-free: the source is read, not imported.
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
EXECUTIONS_SPELLED = re.compile(r"""[\[(]\s*["']protocol["']\s*,\s*["']exact_sum["']""")


def spelled(pattern: re.Pattern[str]) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}: {line.strip()}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for line in path.read_text().splitlines()
        if pattern.search(line)
    ]


def test_the_graph_modes_are_spelled_out_once() -> None:
    assert spelled(SPELLED) == ['accounting/choices.py: SecaggMode = Literal["full", "sparse"]']
    assert get_args(SecaggMode) == ("full", "sparse")
    assert get_args(RequestedSecagg) == ("full", "sparse", "auto")


def test_the_executions_are_spelled_out_once() -> None:
    """They were retyped in trainer/rounds.py (the Literal and a check), trainer/run/config.py
    and the parser's choices."""
    assert spelled(EXECUTIONS_SPELLED) == ['trainer/choices.py: SecAggExecution = Literal["protocol", "exact_sum"]']


def test_the_train_parser_offers_the_config_fields_choices() -> None:
    """The parser's choices are TrainConfig's Literals, which are the shared ones."""
    import argparse

    from trainer.choices import SecAggExecution
    from trainer.run.options import add_run_options

    parser = argparse.ArgumentParser()
    add_run_options(parser)
    offered = {action.dest: tuple(action.choices) for action in parser._actions if action.choices}
    assert offered["secagg_mode"] == get_args(RequestedSecagg)
    assert offered["secagg_execution"] == get_args(SecAggExecution)
