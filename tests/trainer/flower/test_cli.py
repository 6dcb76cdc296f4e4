"""``gdpfed flower app`` writes a bundle Flower accepts; ``gdpfed flower loopback`` runs it; bad input is one line."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from app import cli as app_cli
from tests.trainer.trainer_plans import hand_plan
from trainer.units.strategies import STRATEGIES

TINY = ["--dataset", "digits", "--model", "mlp", "--model-option", "hidden=[8]", "--local-steps", "1"]


@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    plan = hand_plan([("strict", 1.0, 2, 1.0), ("loose", 4.0, 2, 1.0)],
                     [("p_strict", ["strict"], 1.2, 2, 0.3), ("p_loose", ["loose"], 0.4, 2, 1.0)], rounds=2)
    path = tmp_path / "plan.json"
    path.write_text(plan.model_dump_json())
    return path


# Every registered strategy of the client unit runs on Flower, those with per-client state
# (fedhdp's personal models) keeping it on the nodes.
CLIENT_STRATEGIES = [name for name, spec in STRATEGIES.items() if spec.privacy_unit == "client"]


@pytest.mark.parametrize("strategy", CLIENT_STRATEGIES)
def test_app_writes_a_bundle_flower_accepts_and_loopback_runs_it(
    strategy: str, plan_file: Path, tmp_path: Path, capsys
) -> None:
    from flwr.cli.build import build_fab_from_disk

    code = app_cli.run(["flower", "app", "--plan", str(plan_file), *TINY, "--rounds", "2", "--strategy", strategy,
                        "--out", str(tmp_path / "app"), "--run-dir", str(tmp_path / "run"), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    written = json.loads(out.out)
    config = tomllib.loads((tmp_path / "app" / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    assert config == written["run_config"]
    assert config["out-dir"] == str((tmp_path / "run").resolve()) and config["model-options"] == '{"hidden": [8]}'
    # Flower's own builder packs it (the FAB carries the plan and the two app modules)
    import io
    import zipfile

    names = zipfile.ZipFile(io.BytesIO(build_fab_from_disk(tmp_path / "app"))).namelist()
    assert {"plan.json", "gdpfed_app/server_app.py", "gdpfed_app/client_app.py", "pyproject.toml"} <= set(names)

    code = app_cli.run(["flower", "loopback", str(tmp_path / "app"), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    summary = json.loads(out.out)
    assert summary["complete"] and summary["rounds_run"] == 2 and summary["strategy"] == strategy
    assert (tmp_path / "run" / "rounds.jsonl").is_file()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--rounds", "3"], "rounds: 3 exceeds the plan's 2 rounds"),
        (["--strategy", "fedprox"], "strategy: unknown strategy 'fedprox'"),
        (["--strategy-option", "adaptive_clip=true"], "strategy-option adaptive_clip: the plan has no adaptive_clip block"),
        (["--local-steps", "0"], "local_steps"),
        (["--step-timeout", "0"], "step-timeout"),
    ],
)
def test_app_refuses_bad_settings_in_one_line(plan_file: Path, tmp_path: Path, capsys, extra, message) -> None:
    code = app_cli.run(["flower", "app", "--plan", str(plan_file), *TINY, *extra, "--out", str(tmp_path / "app"),
                        "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "app").exists()


def test_app_refuses_a_non_empty_directory_and_loopback_a_non_bundle(plan_file: Path, tmp_path: Path, capsys) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "notes.txt").write_text("mine")
    code = app_cli.run(["flower", "app", "--plan", str(plan_file), *TINY, "--out", str(tmp_path / "app"),
                        "--run-dir", str(tmp_path / "run")])
    assert code == 2 and "is not an empty directory" in capsys.readouterr().err
    code = app_cli.run(["flower", "loopback", str(tmp_path / "app")])
    assert code == 2 and "is not an app directory" in capsys.readouterr().err


def test_local_refuses_a_process_bound_below_one_before_starting_anything(tmp_path: Path, capsys) -> None:
    code = app_cli.run(["flower", "local", str(tmp_path / "missing-app"), "--max-processes", "0",
                        "--work", str(tmp_path / "work")])
    err = capsys.readouterr().err
    assert code == 2 and "max-processes" in err and "at least 1" in err and "Traceback" not in err
    assert not (tmp_path / "work").exists()


def test_local_refuses_too_few_nodes_for_any_threshold_before_starting_anything(
    plan_file: Path, tmp_path: Path, capsys
) -> None:
    """Fewer nodes than any pool's m_P: every round would abort, so nothing starts (exit 2, one
    line naming --nodes and what the plan needs); enough for some pools only: a warning."""
    assert app_cli.run(["flower", "app", "--plan", str(plan_file), *TINY, "--out", str(tmp_path / "app"),
                        "--run-dir", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    # loopback first: before the check, it ran every round aborted and exited 0
    assert app_cli.run(["flower", "loopback", str(tmp_path / "app"), "--nodes", "1"]) == 2
    assert "every round would abort" in capsys.readouterr().err
    code = app_cli.run(["flower", "local", str(tmp_path / "app"), "--nodes", "1", "--work", str(tmp_path / "work")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "nodes: --nodes 1 gives no pool its secure-aggregation threshold m_P" in err, err
    assert "4 for every pool" in err and "p_loose needs 4 nodes" in err, err
    # exactly m_P nodes in a pool release only in rounds that sample every one of them
    assert "only in rounds that sample all of them" in err, err
    assert not (tmp_path / "work").exists()

    from planner.units import load_plan
    from trainer.flower.cli import check_node_count, simulation_nodes

    # the verdict for every --nodes agrees with the nodes simulation_nodes deals into each pool
    plan = load_plan(json.loads(plan_file.read_text()))
    pool_of = {g.id: g.pool for g in plan.groups}
    for count in range(1, plan.scenario.total_clients + 1):
        dealt = [pool_of[str(n["gdpfed-group"])] for n in simulation_nodes(plan, count, 0)]
        reached = [dealt.count(p.id) >= p.secagg_threshold for p in plan.pools]
        if not any(reached):
            with pytest.raises(Exception, match="every round would abort"):
                check_node_count(plan, count, 0)
        elif not all(reached):
            warning = check_node_count(plan, count, 0)
            assert warning is not None and "can never reach m_P" in warning
            assert "only in rounds that sample at least m_P of its nodes" in warning
            assert all(p.id in warning for p, ok in zip(plan.pools, reached) if not ok)
        else:
            assert check_node_count(plan, count, 0) is None
    assert check_node_count(plan, None, 0) is None


def test_app_takes_a_yaml_plan(plan_file: Path, tmp_path: Path, capsys) -> None:
    import yaml

    document = json.loads(plan_file.read_text())
    (tmp_path / "plan.yml").write_text(yaml.safe_dump(document))
    code = app_cli.run(["flower", "app", "--plan", str(tmp_path / "plan.yml"), *TINY, "--out", str(tmp_path / "app"),
                        "--run-dir", str(tmp_path / "run")])
    assert code == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "app" / "plan.json").read_text()) == document


def test_gdpfed_flower_asks_the_units_flower_record_not_its_name(plan_file: Path, monkeypatch) -> None:
    """The strategy check, the nodes and their count come from the plan's ``FlowerUnit``
    (``FLOWER_MECHANISMS`` by the unit's mechanism): a unit on Flower is one record, with no
    branch on its name in ``trainer.flower.cli`` (issue 28)."""
    from dataclasses import replace

    from planner.units import load_plan
    from trainer.flower import server_app
    from trainer.flower.cli import check_node_count, simulation_nodes
    from trainer.units.registry import unit_for

    plan = load_plan(json.loads(plan_file.read_text()))
    mechanism = unit_for(plan).mechanism
    asked: list[str] = []

    def nodes(plan: object, count: int | None, seed: int) -> list[dict[str, str | int | bool]]:
        asked.append("nodes")
        return [{"partition-id": 0}]

    def counted(plan: object, count: int | None, seed: int) -> str | None:
        asked.append("count")
        return "warning: the record's"

    record = replace(server_app.FLOWER_MECHANISMS[mechanism], simulation_nodes=nodes, check_node_count=counted)
    monkeypatch.setitem(server_app.FLOWER_MECHANISMS, mechanism, record)
    assert simulation_nodes(plan, 1, 0) == [{"partition-id": 0}]
    assert check_node_count(plan, 1, 0) == "warning: the record's"
    assert asked == ["nodes", "count"]


def test_app_refuses_skellam_for_a_plan_without_discrete_blocks_before_writing(plan_file: Path, tmp_path: Path,
                                                                                capsys) -> None:
    """--secagg-mechanism skellam needs the plan's discrete blocks (report_discrete: true), and
    with adaptive clipping blocks that carry the count coordinate (the plan's adaptive_clip
    block); `gdpfed flower app` says so in one line, as the run would, and writes nothing. A
    plan planned with both writes its bundle (skellam with adaptive clipping runs on Flower)."""
    from planner.finalize import with_discrete
    from planner.units import load_plan
    from tests.trainer.test_adaptive_clip import with_adaptive_clip

    plan = json.loads(plan_file.read_text())

    def stated(adaptive: bool) -> Path:
        loaded = load_plan(plan)
        loaded = with_adaptive_clip(loaded, count_noise_std=2.0, learning_rate=0.5) if adaptive else loaded
        path = tmp_path / f"discrete-{adaptive}.json"
        path.write_text(with_discrete(loaded.model_copy(update={"scenario": loaded.scenario.model_copy(
            update={"report_discrete": True})})).model_dump_json())
        return path

    adaptive_option = ["--strategy", "fedhdp", "--strategy-option", "adaptive_clip=true"]
    for path, extra, field in ((plan_file, ["--secagg-mechanism", "skellam"], "pools.p_strict.discrete"),
                               (stated(False), ["--secagg-mechanism", "skellam", *adaptive_option],
                                "secagg_mechanism")):
        code = app_cli.run(["flower", "app", "--plan", str(path), *TINY, "--rounds", "2", *extra,
                            "--out", str(tmp_path / "app"), "--run-dir", str(tmp_path / "run")])
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and f"{field}:" in err, err
        assert not (tmp_path / "app").exists()
    code = app_cli.run(["flower", "app", "--plan", str(stated(True)), *TINY, "--rounds", "2", "--secagg-mechanism",
                        "skellam", *adaptive_option, "--out", str(tmp_path / "app"), "--run-dir", str(tmp_path / "run")])
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "app" / "plan.json").exists()


def test_app_writes_the_bundle_of_an_old_skellam_plan_with_the_runs_warning(tmp_path: Path, capsys) -> None:
    """A plan of the release before the plans stated their Skellam figures (its groups state the
    Gaussian's, below the blocks' ledger) is bundled as gdpfed train runs it, with its warning,
    not refused (docs/ledger.md §5)."""
    old = Path(__file__).resolve().parents[2] / "planner" / "data" / "plan-skellam-gaussian-figures.json"
    code = app_cli.run(["flower", "app", "--plan", str(old), *TINY, "--rounds", "1",
                        "--out", str(tmp_path / "app"), "--run-dir", str(tmp_path / "run")])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert (tmp_path / "app" / "plan.json").is_file()
    warnings = [line for line in out.out.splitlines() if "below what its skellam run spends" in line]
    assert len(warnings) == 1 and warnings[0].startswith("warning: "), out.out
    # a run forced to the continuous mechanism counts the Gaussian phases: the plan's skellam
    # figures are not what it spends, so there is no such warning (as gdpfed train)
    code = app_cli.run(["flower", "app", "--plan", str(old), *TINY, "--rounds", "1", "--secagg-mechanism",
                        "gaussian_continuous", "--out", str(tmp_path / "app2"), "--run-dir", str(tmp_path / "run2")])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "below what its skellam run spends" not in out.out, out.out


def test_app_writes_the_bundle_of_a_silo_plan_stating_less_with_the_runs_warning(tmp_path: Path, capsys) -> None:
    """A silo plan whose stated figure is below its ledger (refused by gdpfed plan verify) is
    bundled as gdpfed train runs it, with the run's one warning (docs/mrmtl.md §2)."""
    from tests.trainer.flower.test_silo import silo_plan

    document = silo_plan("mrmtl", [20, 25]).model_dump(mode="json")
    counted = document["silos"][0]["epsilon_tight"]
    document["silos"][0]["epsilon_tight"] = counted / 2
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(document))
    code = app_cli.run(["flower", "app", "--plan", str(path), "--dataset", "rotated_digits", "--model", "mlp",
                        "--rounds", "1", "--out", str(tmp_path / "app"), "--run-dir", str(tmp_path / "run")])
    out = capsys.readouterr()
    assert code == 0, out.err
    warnings = [line for line in out.out.splitlines() if "below what its dpsgd_silo run spends" in line]
    assert len(warnings) == 1 and warnings[0].startswith("warning: ") and "epsilon_tight states" in warnings[0], out.out
