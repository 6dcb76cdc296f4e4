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
        (["--local-steps", "0"], "local-steps: Input should be greater than or equal to 1"),
        (["--step-timeout", "0"], "step-timeout"),
    ],
)
def test_app_refuses_bad_settings_in_one_line(plan_file: Path, tmp_path: Path, capsys, extra, message) -> None:
    code = app_cli.run(["flower", "app", "--plan", str(plan_file), *TINY, *extra, "--out", str(tmp_path / "app"),
                        "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "app").exists()


def test_app_refuses_an_unknown_model_before_writing(plan_file: Path, tmp_path: Path, capsys) -> None:
    """Before, the bundle was written and the ServerApp refused the model on the SuperLink."""
    code = app_cli.run(["flower", "app", "--plan", str(plan_file), "--dataset", "digits", "--model", "nosuch",
                        "--out", str(tmp_path / "app"), "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == (
        "gdpfed flower: error: model: unknown model 'nosuch'; use one of mlp, cnn, resnet18, lstm, mean"), err
    assert not (tmp_path / "app").exists()
    # build_model's reading of a name: case, '-' and '_' ignored
    assert app_cli.run(["flower", "app", "--plan", str(plan_file), "--dataset", "digits", "--model", "MLP",
                        "--out", str(tmp_path / "app"), "--run-dir", str(tmp_path / "run")]) == 0


def test_app_refuses_a_silo_plan_on_a_client_dataset_before_writing(tmp_path: Path, capsys) -> None:
    """A silo plan trains on one of the silo datasets, a fixed list, as gdpfed train refuses others;
    before, the bundle was written and the ServerApp refused the dataset on the SuperLink."""
    from tests.trainer.flower.test_silo import silo_plan

    (tmp_path / "silo-plan.json").write_text(silo_plan("mrmtl", [40, 40]).model_dump_json())
    argv = ["flower", "app", "--plan", str(tmp_path / "silo-plan.json"), "--model", "mlp",
            "--out", str(tmp_path / "app"), "--run-dir", str(tmp_path / "run")]
    code = app_cli.run([*argv, "--dataset", "digits"])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == ("gdpfed flower: error: dataset: silo plans train on rotated_digits, "
                                         "mean_estimation, got 'digits' (other datasets are for client and "
                                         "metric_local plans)"), err
    assert not (tmp_path / "app").exists()
    assert app_cli.run([*argv, "--dataset", "Rotated-Digits"]) == 0  # load_silo_data's reading of the name


@pytest.mark.parametrize("option", ["--wait-timeout", "--step-timeout", "--lr"])
def test_app_names_the_option_of_an_infinite_value(plan_file: Path, tmp_path: Path, capsys, option: str) -> None:
    """A run config carries finite numbers only; before, the refusal named 'run-config', not the option.
    --lr is a run option, refused as gdpfed train refuses it (TrainConfig: 'must be a finite number')."""
    code = app_cli.run(["flower", "app", "--plan", str(plan_file), *TINY, option, "inf", "--out", str(tmp_path / "app"),
                        "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    said = "must be a finite number" if option == "--lr" else "must be a finite number, got inf"
    assert code == 2 and err.strip() == f"gdpfed flower: error: {option[2:]}: {said}", err


@pytest.mark.parametrize("option", ["--wait-timeout", "--step-timeout", "--lr"])
def test_app_says_nan_is_not_a_finite_number(plan_file: Path, tmp_path: Path, capsys, option: str) -> None:
    """NaN in a positive-only option: before, pydantic's 'Input should be greater than 0'."""
    code = app_cli.run(["flower", "app", "--plan", str(plan_file), *TINY, option, "nan", "--out", str(tmp_path / "app"),
                        "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{option[2:]}: " in err and "must be a finite number" in err and "greater than" not in err, err


def test_the_bundle_requires_the_flower_releases_the_extra_does(plan_file: Path, tmp_path: Path, capsys) -> None:
    """The bundle's flwr requirement is the one range gdpfed runs on (trainer.flower.FLWR_REQUIREMENT,
    which check_flwr_version holds and pyproject.toml's flower extra states). Before, the bundle
    required flwr>= the release that wrote it (1.42.0), so a SuperLink or node on 1.41, which the
    extra installs and the code runs on, was told the app needs a newer Flower."""
    from importlib.metadata import version

    from packaging.specifiers import SpecifierSet

    from trainer.flower import FLWR_REQUIREMENT

    repo = Path(__file__).resolve().parents[3]
    extra = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["optional-dependencies"]["flower"]
    assert f"flwr{FLWR_REQUIREMENT}" in extra, extra
    assert app_cli.run(["flower", "app", "--plan", str(plan_file), *TINY, "--out", str(tmp_path / "app"),
                        "--run-dir", str(tmp_path / "run")]) == 0, capsys.readouterr().err
    written = tomllib.loads((tmp_path / "app" / "pyproject.toml").read_text())
    assert written["project"]["dependencies"] == [f"flwr{FLWR_REQUIREMENT}"]
    target = written["tool"]["flwr"]["app"]["flwr-version-target"]
    assert target == version("flwr") and target in SpecifierSet(FLWR_REQUIREMENT)


def test_a_refused_bundle_leaves_nothing_behind(plan_file: Path, tmp_path: Path, capsys) -> None:
    """A value refused while the bundle is written leaves no partial bundle: before, plan.json,
    LICENSE and the package stayed in --out, and the corrected command was refused with 'out:
    ... exists and is not an empty directory'."""
    argv = ["flower", "app", "--plan", str(plan_file), *TINY, "--out", str(tmp_path / "app"),
            "--run-dir", str(tmp_path / "run")]
    assert app_cli.run([*argv, "--wait-timeout", "inf"]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]  # nothing of the bundle, no staging left
    capsys.readouterr()
    (tmp_path / "app").mkdir()  # an empty --out is taken, as before
    assert app_cli.run([*argv, "--wait-timeout", "30"]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "app").iterdir()) == ["LICENSE", "gdpfed_app", "plan.json", "pyproject.toml"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app", "plan.json"]


def test_app_refuses_report_to_without_a_plan_id_before_writing(plan_file: Path, tmp_path: Path, capsys) -> None:
    """As gdpfed train; before, the bundle was written and the ServerApp refused it on the SuperLink."""
    argv = ["flower", "app", "--plan", str(plan_file), *TINY, "--out", str(tmp_path / "app"),
            "--run-dir", str(tmp_path / "run"), "--report-to", "http://127.0.0.1:9"]
    code = app_cli.run(argv)
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("gdpfed flower: error: plan-id: --report-to needs --plan-id") and \
        len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "app").exists()
    assert app_cli.run([*argv, "--plan-id", "p-1"]) == 0  # or the plan document's own id


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


@pytest.mark.parametrize(("value", "said"), [("nan", "must be a finite number"), ("inf", "must be a finite number"),
                                             ("0", "must be more than 0 seconds, got 0")])
def test_local_refuses_a_timeout_that_is_no_number_of_seconds_before_starting_anything(
    tmp_path: Path, capsys, value: str, said: str
) -> None:
    """Before, nan and inf were taken (flwr run was waited for without end) and 0 started the
    SuperLink and the nodes only to give up at once."""
    code = app_cli.run(["flower", "local", str(tmp_path / "missing-app"), f"--timeout={value}",
                        "--work", str(tmp_path / "work")])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == f"gdpfed flower: error: timeout: {said}", err
    assert not (tmp_path / "work").exists()


def test_local_names_the_server_apps_refusal_in_one_line(plan_file: Path, tmp_path: Path, capsys) -> None:
    """Real processes: a ServerApp that stops on a gdpfed error (here a run directory that already
    holds files) writes its one line into the run's log and fails the run at once; ``gdpfed flower
    local`` exits 2 with that line. Before, the ServerApp left by SystemExit, which skipped Flower's
    log upload and status report: the line never reached the log, the run looked alive until the
    SuperLink missed its heartbeats, and the command said only 'flwr run exit 0'."""
    assert app_cli.run(["flower", "app", "--plan", str(plan_file), *TINY, "--out", str(tmp_path / "app"),
                        "--run-dir", str(tmp_path / "run")]) == 0
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("another run's\n")
    capsys.readouterr()
    code = app_cli.run(["flower", "local", str(tmp_path / "app"), "--nodes", "4", "--work", str(tmp_path / "work")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("gdpfed flower: error: the ServerApp stopped: out-dir: ") and "is not empty" in last, err
    log = (tmp_path / "work" / "flwr-run.log").read_text(errors="replace")
    assert "gdpfed: error: out-dir: " in log and "Traceback" not in log, log[-3000:]


def test_local_fails_a_run_that_wrote_no_summary_of_its_own(plan_file: Path, tmp_path: Path, capsys,
                                                           monkeypatch) -> None:
    """A run whose ServerApp ended without its line (a crash, a kill) and wrote no summary fails,
    even where an earlier run left a summary.json in the run directory: before, ``gdpfed flower
    local`` printed that earlier run's summary and exited 0 (``flwr run`` exits 0 on a failed run)."""
    from trainer.flower import local

    assert app_cli.run(["flower", "app", "--plan", str(plan_file), *TINY, "--out", str(tmp_path / "app"),
                        "--run-dir", str(tmp_path / "run")]) == 0
    assert app_cli.run(["flower", "loopback", str(tmp_path / "app")]) == 0  # an earlier run: its summary.json
    assert (tmp_path / "run" / "summary.json").is_file()
    capsys.readouterr()

    class CrashedRun(local.LocalFederation):
        def start(self, timeout_s: float = 120.0) -> None:
            self.work.mkdir(parents=True, exist_ok=True)

        def run(self, app_dir: Path, run_config: dict[str, str] | None = None, timeout_s: float = 3600.0) -> int:
            (self.work / "flwr-run.log").write_text("INFO : Start `flwr-serverapp` process\n")
            return 0  # what flwr run --stream exits with when the ServerApp failed

    monkeypatch.setattr(local, "LocalFederation", CrashedRun)
    code = app_cli.run(["flower", "local", str(tmp_path / "app"), "--work", str(tmp_path / "work")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert "the Flower run failed (flwr run exit 0; it wrote no summary to " in err.strip().splitlines()[-1], err


def test_a_used_run_directory_is_refused_in_a_flower_runs_words(plan_file: Path, tmp_path: Path, capsys) -> None:
    """The ServerApp names its run config (out-dir, resume=true) and the bundle's --run-dir, not
    gdpfed train's --out and --resume, which no Flower command takes."""
    assert app_cli.run(["flower", "app", "--plan", str(plan_file), *TINY, "--out", str(tmp_path / "app"),
                        "--run-dir", str(tmp_path / "run")]) == 0
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("another run's\n")
    capsys.readouterr()
    assert app_cli.run(["flower", "loopback", str(tmp_path / "app")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gdpfed flower: error: out-dir: {tmp_path / 'run'} is not empty; run with --run-config "
                          "resume=true to continue the run there, or write the bundle with another --run-dir"), err


def test_local_passes_run_config_values_to_flwr_run(plan_file: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    """``--run-config KEY=VALUE`` reaches the run as ``flwr run --run-config`` passes it on a
    deployment (``resume=true`` continues a run directory; before, gdpfed flower local took no run
    config, so a run it left could not be resumed without editing the bundle); bad items are
    refused before any process starts."""
    from trainer.flower import local

    assert app_cli.run(["flower", "app", "--plan", str(plan_file), *TINY, "--out", str(tmp_path / "app"),
                        "--run-dir", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    for item, message in [("eval-every=0", "error: eval-every: Input should be greater than or equal to 1"),
                          ("resume", "error: run-config: 'resume' is not KEY=VALUE"),
                          ("round=2", "error: run-config: the app's run config has no key 'round'"),
                          ("out-dir=/srv/x", "error: run-config out-dir: '/srv/x' is not a TOML value")]:
        code = app_cli.run(["flower", "local", str(tmp_path / "app"), "--run-config", item, "--work", str(tmp_path / "w")])
        err = capsys.readouterr().err
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (item, err)
        assert not (tmp_path / "w").exists()

    given: dict[str, str] = {}

    class InProcess(local.LocalFederation):  # no processes: the ServerApp's run_plan on a LoopbackGrid
        def start(self, timeout_s: float = 120.0) -> None:
            self.work.mkdir(parents=True, exist_ok=True)

        def run(self, app_dir: Path, run_config: dict[str, str] | None = None, timeout_s: float = 3600.0) -> int:
            import tomllib

            from trainer.flower.cli import _bundle
            from trainer.flower.client_app import build_client_app
            from trainer.flower.server_app import run_plan
            from trainer.flower.testing import LoopbackGrid

            given.update(run_config or {})
            plan, document, config = _bundle(Path(app_dir))
            config = {**config, **{k: tomllib.loads(f"v = {v}")["v"] for k, v in given.items()}}
            nodes = {1 + i: n for i, n in enumerate(self.node_configs)}
            run_plan(LoopbackGrid(build_client_app(Path(app_dir)), nodes, config), document, config)
            return 0

    monkeypatch.setattr(local, "LocalFederation", InProcess)
    code = app_cli.run(["flower", "local", str(tmp_path / "app"), "--run-config", "eval-every=2", "--run-config",
                        "seed=3", "--work", str(tmp_path / "work")])
    assert code == 0, capsys.readouterr().err
    assert given == {"min-nodes": "4", "eval-every": "2", "seed": "3"}
    stored = json.loads((tmp_path / "run" / "config.json").read_text())
    assert stored["eval_every"] == 2 and stored["seed"] == 3


def test_local_refuses_a_skewed_label_override_on_a_bundle_that_deals_clients_at_random(
    plan_file: Path, tmp_path: Path, capsys
) -> None:
    """``gdpfed flower local --run-config skewed-label=N`` on a bundle whose clients are dealt at
    random: the label is read only by opt-out-assignment skewed, so it was ignored in silence and
    the run started, as gdpfed train and gdpfed flower app no longer let ``--skewed-label`` be
    (8dfe59d). It is one line naming skewed-label, exit 2, before any process starts."""
    assert app_cli.run(["flower", "app", "--plan", str(plan_file), *TINY, "--out", str(tmp_path / "app"),
                        "--run-dir", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    code = app_cli.run(["flower", "local", str(tmp_path / "app"), "--run-config", "skewed-label=3",
                        "--work", str(tmp_path / "w")])
    err = capsys.readouterr().err
    assert code == 2 and "error: skewed-label: " in err and "opt-out-assignment skewed" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "w").exists()


def test_the_server_apps_error_line_carries_its_exit_code(tmp_path: Path) -> None:
    """Exit 3 (reporting stopped: rerun with resume) survives the trip through the run's log."""
    from accounting.errors import InvalidInputError
    from trainer.flower.cli import server_app_error
    from trainer.flower.server_app import error_line
    from trainer.run.reporting import ReportingStoppedError

    log = tmp_path / "flwr-run.log"
    log.write_text(f"an earlier run\n{error_line(InvalidInputError('rounds', 'old'))}\nINFO : started\n")
    assert server_app_error(log, log.stat().st_size) is None  # an earlier run's line is not this run's
    with log.open("a") as stream:
        stream.write(error_line(ReportingStoppedError("the service re-planned\nthis plan")) + "\n")
    found = server_app_error(log, 0)
    assert found is not None and found.exit_code == 3
    assert found.message.startswith("the ServerApp stopped: the service re-planned\\nthis plan (see ")


def test_local_federation_resolves_a_relative_work_directory(tmp_path: Path, monkeypatch) -> None:
    """Flower's processes run with their cwd in the work directory: a relative ``--work`` gave them
    FLWR_HOME work/work/flwr-home, where flwr run found no connection and the run failed."""
    from trainer.flower.local import LocalFederation

    monkeypatch.chdir(tmp_path)
    federation = LocalFederation(Path("work"), [])
    assert federation.work == tmp_path / "work"
    assert federation.env["FLWR_HOME"] == str(tmp_path / "work" / "flwr-home")


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
