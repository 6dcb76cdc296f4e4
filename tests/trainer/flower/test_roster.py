"""The server's hello exchange (``trainer.flower.roster.NodeRoster``) as the silo and metric
units use it, over ``LoopbackGrid`` with the real ClientApp (docs/flower.md §9, §10): which
node is admitted, which is left out and why (one log line each, in node-id order), and
that a node that did not answer is asked again while one left out is not."""

from __future__ import annotations

from pathlib import Path

from tests.trainer.flower.conftest import write_plan_bundle
from tests.trainer.flower.test_metric import CLIENTS, metric_config, metric_plan
from tests.trainer.flower.test_silo import silo_config, silo_plan
from trainer.flower.client_app import build_client_app
from trainer.flower.metric import METRIC_HELLO, MetricMembership
from trainer.flower.settings import FlowerOptions, run_config_of
from trainer.flower.silo import SILO_HELLO, SiloMembership
from trainer.flower.testing import LoopbackGrid
from trainer.run.directory import fingerprint


class Asked:
    """A drop rule that records the nodes each hello reached and drops ``silent``'s first one."""

    def __init__(self, hello: str, silent: int) -> None:
        self.hello, self.silent = hello, silent
        self.asked: list[int] = []

    def __call__(self, node: int, kind: str, _group: str) -> bool:
        if kind != self.hello:
            return False
        self.asked.append(node)
        return node == self.silent and self.asked.count(node) == 1


def test_silo_roster_admits_one_node_per_silo_and_leaves_out_the_rest(tmp_path: Path) -> None:
    plan = silo_plan("mrmtl", [40, 40, 40])
    other = tmp_path / "other-plan.json"
    other.write_text(silo_plan("mrmtl", [40, 40, 41]).model_dump_json())
    nodes = {
        7: {"gdpfed-silo": "s1"},
        3: {"gdpfed-silo": "s1"},  # the lower node id claims s1 first, whatever order the replies come in
        5: {"gdpfed-silo": "s0", "gdpfed-plan": str(other)},
        9: {"gdpfed-silo": "elsewhere"},  # its own node refuses: an error reply
        4: {"gdpfed-silo": "s2"},  # silent at first
    }
    asked = Asked(SILO_HELLO, silent=4)
    run_config = run_config_of(FlowerOptions.model_validate({"out-dir": str(tmp_path / "out")}), silo_config())
    grid = LoopbackGrid(build_client_app(write_plan_bundle(tmp_path / "bundle", plan)), nodes, run_config, drop=asked)
    lines: list[str] = []
    roster = SiloMembership(grid, plan, fingerprint(plan.model_dump(mode="json")), timeout=5.0, log=lines.append)

    roster.refresh()
    assert roster.nodes == {"s1": 3}
    assert roster.excluded[5] == "holds another plan"
    assert roster.excluded[7] == "declares silo 's1', which node 3 is"
    assert roster.excluded[9].startswith("error: ") and "'elsewhere' is not a silo of the plan" in roster.excluded[9]
    assert set(roster.excluded) == {5, 7, 9}
    assert lines == [f"node {n} left out: {roster.excluded[n]}" for n in (5, 7, 9)]
    assert roster.online == frozenset(nodes)

    roster.refresh()  # only the node that did not answer is asked again
    assert asked.asked == [3, 4, 5, 7, 9, 4]
    assert roster.nodes == {"s1": 3, "s2": 4}
    assert roster.joined_line() == "2 of 3 silo(s) joined: s1, s2"  # the ServerApp's line
    assert len(lines) == 3
    roster.refresh()
    assert asked.asked == [3, 4, 5, 7, 9, 4]


def test_metric_roster_admits_one_node_per_client_and_leaves_out_the_rest(tmp_path: Path) -> None:
    plan = metric_plan("own_update")
    other = tmp_path / "other-plan.json"
    other.write_text(metric_plan("own_update", budget=11.0).model_dump_json())
    nodes = {
        20: {"partition-id": 2, "gdpfed-group": "all"},
        10: {"partition-id": 2, "gdpfed-group": "all"},  # the lower node id is client 2
        30: {"partition-id": 1, "gdpfed-group": "all", "gdpfed-plan": str(other)},
        40: {"partition-id": CLIENTS, "gdpfed-group": "all"},  # past the plan's population
        50: {"partition-id": 4, "gdpfed-group": "nobody"},  # its own node refuses: an error reply
        60: {"partition-id": 5, "gdpfed-group": "all"},  # silent at first
    }
    asked = Asked(METRIC_HELLO, silent=60)
    run_config = run_config_of(FlowerOptions.model_validate({"out-dir": str(tmp_path / "out")}), metric_config())
    grid = LoopbackGrid(build_client_app(write_plan_bundle(tmp_path / "bundle", plan)), nodes, run_config, drop=asked)
    grid.offline.add(60)
    lines: list[str] = []
    roster = MetricMembership(grid, plan, fingerprint(plan.model_dump(mode="json")), timeout=5.0, log=lines.append)

    roster.refresh()
    assert roster.online == frozenset({10, 20, 30, 40, 50})
    assert roster.clients == {2: (10, "all")}
    assert roster.excluded[20] == "declares client 2, which node 10 is"
    assert roster.excluded[30] == "holds another plan"
    assert roster.excluded[40] == f"declares client {CLIENTS}, not one of the plan's population"
    assert roster.excluded[50].startswith("error: ")
    assert "gdpfed-group: 'nobody' is not a group of the plan" in roster.excluded[50]
    assert set(roster.excluded) == {20, 30, 40, 50}
    assert lines == [f"node {n} left out: {roster.excluded[n]}" for n in (20, 30, 40, 50)]

    grid.offline.clear()
    roster.refresh()
    roster.refresh()  # node 60 drops its first hello, answers the second; no one else is asked again
    assert asked.asked == [10, 20, 30, 40, 50, 60, 60]
    assert roster.clients == {2: (10, "all"), 5: (60, "all")}
    assert roster.groups == {10: "all", 60: "all"}
    assert roster.joined_line() == "2 node(s) joined: all=2"  # the ServerApp's line
    assert len(lines) == 4
