"""`gdpfed flower local` runs the discrete (Skellam) mechanism on real Flower processes.

Four SuperNodes on loopback, one round, every node sampled: each node computes its
Skellam share from its own copy of the plan in its own ClientApp process, the sessions
speak the wire's protocol version, and the summary's ledger counts the plan's Skellam
event (``ClientTally`` with mechanism skellam), as `gdpfed train --secagg-mechanism skellam`
counts it (docs/flower.md §2 "The discrete mechanism and the wire version").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app import cli as app_cli
from planner.finalize import with_discrete
from tests.trainer.trainer_plans import hand_plan
from trainer.run.metrics import read_rounds
from trainer.units.client.tally import ClientTally

SETTINGS = ["--dataset", "digits", "--model", "mlp", "--model-option", "hidden=[8]", "--local-steps", "1",
            "--engine", "loop", "--secagg-mechanism", "skellam"]


def test_gdpfed_flower_local_runs_skellam_and_its_ledger_counts_the_skellam_event(tmp_path: Path, capsys: Any) -> None:
    plan = hand_plan([("a", 3.0, 2, 1.0), ("b", 6.0, 2, 1.0)],
                     [("pa", ["a"], 1.0, 2, 1.0), ("pb", ["b"], 0.8, 2, 1.0)],
                     rounds=1, model_dim=610, method="gdpfed")
    plan = with_discrete(plan.model_copy(update={"scenario": plan.scenario.model_copy(update={"report_discrete": True})}))
    assert all(pool.discrete is not None for pool in plan.pools)
    (tmp_path / "plan.json").write_text(plan.model_dump_json())
    code = app_cli.run(["flower", "app", "--plan", str(tmp_path / "plan.json"), *SETTINGS, "--rounds", "1",
                        "--out", str(tmp_path / "app"), "--run-dir", str(tmp_path / "run"), "--step-timeout", "600"])
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()

    code = app_cli.run(["flower", "local", str(tmp_path / "app"), "--work", str(tmp_path / "flower"),
                        "--timeout", "900", "--json"])
    out = capsys.readouterr()
    log = (tmp_path / "flower" / "flwr-run.log").read_text(errors="replace") if code else ""
    assert code == 0, out.err + log[-3000:]
    summary = json.loads(out.out)
    assert summary["complete"] and summary["secagg_mechanism"] == "skellam"
    (record,) = read_rounds(tmp_path / "run" / "rounds.jsonl")
    assert not record.aborted_pools and record.survived == {"pa": 2, "pb": 2}
    tally = ClientTally(plan, mechanism="skellam")
    tally.record_round()
    assert summary["epsilon_spent"] == tally.final_spent()
    gaussian = ClientTally(plan)
    gaussian.record_round()
    assert summary["epsilon_spent"] != gaussian.final_spent()
