"""The command line imports only what the subcommand it runs needs (the import graph, not a timing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app import cli
from planner.loading import load_scenario
from planner.plan import make_plan

PROBE = """
import json, sys
from app.cli import run
try:
    code = run(sys.argv[2:])
except SystemExit as exc:
    code = exc.code
with open(sys.argv[1], "w") as handle:
    json.dump({"code": code, "modules": sorted(sys.modules)}, handle)
"""


def imported(tmp_path: Path, *argv: str) -> tuple[int, set[str]]:
    out = tmp_path / "modules.json"
    subprocess.run([sys.executable, "-c", PROBE, str(out), *argv], capture_output=True, text=True, check=True)
    result = json.loads(out.read_text())
    return result["code"], set(result["modules"])


def loaded(modules: set[str], package: str) -> list[str]:
    return sorted(m for m in modules if m == package or m.startswith(package + "."))


def test_help_imports_no_subcommand(tmp_path: Path) -> None:
    code, modules = imported(tmp_path, "--help")
    assert code == 0
    for heavy in ("planner", "accounting", "trainer", "torch", "scipy", "numpy", "pydantic", "bench", "fastapi"):
        assert loaded(modules, heavy) == [], heavy


def test_account_epsilon_imports_the_accountant_only(tmp_path: Path) -> None:
    code, modules = imported(
        tmp_path, "account", "epsilon", "--sampling-rate", "0.01", "--noise-multiplier", "1.1",
        "--rounds", "100", "--delta", "1e-5",
    )
    assert code == 0
    assert "accounting.rdp" in modules
    for heavy in ("planner", "trainer", "torch", "scipy.signal", "scipy.stats", "scipy.interpolate", "fastapi", "app.main"):
        assert loaded(modules, heavy) == [], heavy


# What no `gdpfed account` question may load: another command's stack (the planner and
# scipy's interpolation, optimisation, statistics and signal processing behind it, the
# trainer and torch, the service's web framework, database and server).
NOT_FOR_ACCOUNTING = (
    "planner", "trainer", "torch", "app.main", "fastapi", "starlette", "sqlalchemy", "uvicorn",
    "scipy.optimize", "scipy.interpolate", "scipy.stats", "scipy.signal", "scipy.linalg",
)
ACCOUNT_EPSILON = ["account", "epsilon", "--sampling-rate", "0.01", "--noise-multiplier", "1.1", "--rounds", "100",
                   "--delta", "1e-5"]


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_account_epsilon_loads_no_other_commands_stack(tmp_path: Path, accountant: str) -> None:
    # issue 26 §3: start-up is imports; a question loads the accountants, numpy and pydantic,
    # nothing heavier
    code, modules = imported(tmp_path, *ACCOUNT_EPSILON, "--accountant", accountant)
    assert code == 0
    for heavy in NOT_FOR_ACCOUNTING:
        assert loaded(modules, heavy) == [], heavy


@pytest.mark.parametrize(
    "question",
    [
        ACCOUNT_EPSILON,
        ["account", "epsilon", "--sampling-rate", "1", "--noise-multiplier", "20", "--rounds", "100", "--delta", "1e-5"],
        ["account", "noise-multiplier", "--sampling-rate", "0.01", "--epsilon", "1", "--rounds", "100", "--delta", "1e-5"],
        ["account", "noise-multiplier", "--sampling-rate", "1", "--epsilon", "1", "--rounds", "10", "--delta", "1e-5"],
        ["account", "rounds", "--sampling-rate", "0.01", "--noise-multiplier", "1", "--epsilon", "1", "--delta", "1e-5"],
    ],
    ids=["epsilon", "epsilon-full-participation", "noise-multiplier", "noise-multiplier-full-participation", "rounds"],
)
def test_default_accountant_questions_import_no_scipy(tmp_path: Path, question: list[str]) -> None:
    # issue 26 §3: scipy.special was 0.12 s of a 0.43 s `gdpfed account epsilon`, imported for
    # the normal tails alone; pld takes them from accounting/normal.py (numpy and math), on the
    # grid and in the closed form of full participation alike
    code, modules = imported(tmp_path, *question)
    assert code == 0
    assert loaded(modules, "scipy") == []
    assert "accounting.accountants.pld" in modules and "accounting.normal" in modules


ACCOUNT_QUESTIONS = {
    "epsilon": ACCOUNT_EPSILON,
    "noise-multiplier": ["account", "noise-multiplier", "--sampling-rate", "0.01", "--epsilon", "1", "--rounds", "100",
                         "--delta", "1e-5"],
    "sampling-rate": ["account", "sampling-rate", "--noise-multiplier", "1", "--epsilon", "1", "--rounds", "100",
                      "--delta", "1e-5"],
    "rounds": ["account", "rounds", "--sampling-rate", "0.01", "--noise-multiplier", "1", "--epsilon", "1",
               "--delta", "1e-5"],
}


@pytest.mark.parametrize("accountant", ["pld", "rdp", "closed_form"])
@pytest.mark.parametrize("question", sorted(ACCOUNT_QUESTIONS))
def test_account_questions_import_no_scipy(tmp_path: Path, question: str, accountant: str) -> None:
    # issue 26 §3: rdp's gammaln and log_ndtr were scipy.special's (0.1-0.2 s of a question's
    # start; pld's sampling-rate search starts from rdp's rate, closed_form checks against
    # rdp): they are accounting/special.py's now, the same values without scipy. (prv's
    # accountant, the prv_accountant package, imports scipy.signal and scipy.stats itself.)
    code, modules = imported(tmp_path, *ACCOUNT_QUESTIONS[question], "--accountant", accountant)
    assert code == 0
    assert "accounting.rdp" in modules
    assert loaded(modules, "scipy") == []
    # numpy's masked arrays (np.unique imports them, ~5 ms): no accountant needs them
    assert loaded(modules, "numpy.ma") == []


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_account_question_loads_no_multiprocessing(tmp_path: Path, accountant: str) -> None:
    # issue 26 §3: multiprocessing serves prv's isolated jobs only (accounting/prv.py
    # run_isolated imports it), not every question that imports the accountants' registry
    code, modules = imported(tmp_path, *ACCOUNT_EPSILON, "--accountant", accountant)
    assert code == 0
    assert "accounting.prv" in modules
    assert loaded(modules, "multiprocessing") == []


@pytest.mark.parametrize(
    "argv",
    [
        ["account", "--help"],
        ["account", "epsilon", "--help"],
        ["account", "epsilon", "--sampling-rate", "0.01"],  # argparse: required options missing
    ],
)
def test_account_parser_loads_no_numerics(tmp_path: Path, argv: list[str]) -> None:
    # issue 26 §3: the parser's accountant names and default come from accounting.choices and
    # the package exports load on first use, so parsing loads no accountant, numpy or pydantic
    code, modules = imported(tmp_path, *argv)
    assert code in (0, 2)
    assert "accounting.cli" in modules
    for heavy in ("numpy", "scipy", "pydantic", "accounting.accountants", "accounting.events", *NOT_FOR_ACCOUNTING):
        assert loaded(modules, heavy) == [], heavy


def test_refused_account_question_loads_no_accountant(tmp_path: Path) -> None:
    # a value pydantic refuses is reported before any accountant (or scipy) is imported
    argv = [("abc" if word == "0.01" else word) for word in ACCOUNT_EPSILON]
    code, modules = imported(tmp_path, *argv)
    assert code == 2
    assert "accounting.requests" in modules
    for heavy in ("scipy", "accounting.accountants", "accounting.calibration", "multiprocessing", *NOT_FOR_ACCOUNTING):
        assert loaded(modules, heavy) == [], heavy


def test_accounting_exports_load_on_first_use() -> None:
    # accounting/__init__.py's exports are read lazily; `accounting.epsilon` stays the
    # function even after the submodule accounting/epsilon.py is imported
    probe = (
        "import sys, accounting.errors\n"
        "assert 'numpy' not in sys.modules and 'accounting.accountants' not in sys.modules\n"
        "import accounting.requests, accounting.epsilon\n"
        "import accounting\n"
        "from accounting import InvalidInputError, PoissonSampledGaussian, epsilon, noise_multiplier, rdp\n"
        "assert callable(accounting.epsilon) and accounting.epsilon is epsilon\n"
        "assert epsilon.__module__ == 'accounting.epsilon' and rdp.__name__ == 'accounting.rdp'\n"
        "assert accounting.epsilon(0.01, 1.1, 10, 1e-5).epsilon > 0\n"
        "assert set(accounting._EXPORTS) == set(accounting.__all__)\n"
        "assert all(hasattr(accounting, n) for n in accounting.__all__) and set(accounting.__all__) <= set(dir(accounting))\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True)


def test_train_refused_loads_no_numerics(tmp_path: Path) -> None:
    # issue 26 §3: a refused `gdpfed train` validates its options with pydantic only (the
    # accounting package's exports are lazy, so its error types load without numpy)
    code, modules = imported(tmp_path, "train", "--plan", "plan.json", "--dataset", "digits", "--model", "mlp",
                             "--lr", "-1")
    assert code == 2
    for heavy in ("numpy", "scipy", "torch", "planner", "accounting.accountants"):
        assert loaded(modules, heavy) == [], heavy


def test_plan_imports_no_signal_processing_or_trainer(tmp_path: Path) -> None:
    # issue 26 §3: scipy.signal (FFT convolution of very wide survivor supports only) is
    # imported where it is used, not by every gdpfed plan
    scenario = Path(__file__).resolve().parents[2] / "examples" / "scenario.json"
    code, modules = imported(tmp_path, "plan", str(scenario))
    assert code == 0
    assert "planner.secagg" in modules
    for heavy in ("scipy.signal", "trainer", "torch", "fastapi"):
        assert loaded(modules, heavy) == [], heavy


def test_plan_imports_no_interpolation(tmp_path: Path) -> None:
    # issue 26 §3: the noise curves' PCHIP is numpy (planner/curves.py pchip, scipy's bits):
    # scipy.interpolate was about 0.03 s of every gdpfed plan's start; a plan still loads
    # scipy.optimize (the allocation's SLSQP polish) and scipy.special
    scenario = Path(__file__).resolve().parents[2] / "examples" / "scenario.json"
    code, modules = imported(tmp_path, "plan", str(scenario))
    assert code == 0
    assert "planner.curves" in modules
    assert loaded(modules, "scipy.interpolate") == []


# What scipy.interpolate brought with it: scipy.optimize and the packages it imports.
OPTIMISATION = ("scipy.interpolate", "scipy.optimize", "scipy.linalg", "scipy.sparse", "scipy.spatial")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["plan", "--help"], 0),
        (["plan", "examples/scenario.json", "--accountant", "nosuch"], 2),  # argparse: not a choice
        (["plan"], 2),  # argparse: no target
    ],
    ids=["help", "bad-choice", "no-target"],
)
def test_plan_parser_loads_no_planner(tmp_path: Path, argv: list[str], expected: int) -> None:
    # issue 26 §2: planner/__init__.py imported the whole planner (and numpy, scipy and the
    # schema's models) into any process that imported one planner module, so `gdpfed plan
    # --help` paid a plan's imports (0.43 s of 0.72); the package's exports and planner/cli.py's
    # handlers now import on first use, and the parser reads accounting.choices alone
    code, modules = imported(tmp_path, *argv)
    assert code == expected
    assert "planner.cli" in modules
    assert loaded(modules, "planner") == ["planner", "planner.cli"]
    for heavy in ("numpy", "scipy", "pydantic", "accounting.accountants", "accounting.events"):
        assert loaded(modules, heavy) == [], heavy


def test_planner_package_exports_load_on_first_use() -> None:
    # planner/__init__.py's exports are read lazily (accounting/lazy.py); `planner.replan` and
    # `planner.sweep` stay the functions even after their submodules are imported
    probe = (
        "import sys, planner\n"
        "assert 'numpy' not in sys.modules and 'planner.schema' not in sys.modules\n"
        "import planner.replan, planner.sweep, planner.loading\n"
        "from planner import Scenario, make_plan, replan, sweep\n"
        "assert planner.replan is replan and replan.__module__ == 'planner.replan' and callable(planner.sweep)\n"
        "assert make_plan.__module__ == 'planner.plan' and Scenario.__module__ == 'planner.schema'\n"
        "assert set(planner._EXPORTS) == set(planner.__all__)\n"
        "assert all(hasattr(planner, n) for n in planner.__all__) and set(planner.__all__) <= set(dir(planner))\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True)


@pytest.mark.parametrize("argv", [["plan", "verify", "PLAN"]], ids=["plan-verify"])
def test_planner_without_an_allocation_loads_no_optimisation(tmp_path: Path, argv: list[str]) -> None:
    # issue 26 §3: planner/calibration.py and planner/curves.py imported scipy.interpolate, and
    # with it scipy.optimize, linalg, sparse and spatial, into every process that imported the
    # planner's ledger (`gdpfed plan verify`, the trainer, the service); only an allocation's
    # SLSQP polish needs scipy.optimize, and it imports it where it runs
    root = Path(__file__).resolve().parents[2]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(make_plan(load_scenario(root / "examples" / "scenario.json"), "dp_fedavg",
                                         clients_needed=False).model_dump(mode="json")))
    code, modules = imported(tmp_path, *[str(plan) if a == "PLAN" else a for a in argv])
    assert code == 0
    assert "planner.calibration" in modules and "planner.curves" in modules
    for heavy in OPTIMISATION:
        assert loaded(modules, heavy) == [], heavy


def test_service_import_loads_no_optimisation() -> None:
    probe = (
        "import sys, app.main\n"
        "assert 'planner.calibration' in sys.modules\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] == 'scipy' and m.startswith({OPTIMISATION!r})))\n"
    )
    completed = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert completed.stdout.strip() == "[]"


def test_service_and_planner_imports_load_no_scipy() -> None:
    # issue 26 §2: planner/secagg.py imported scipy.special (about 0.2 s, its array-API layer)
    # at import time, so the service, the trainer and every importer of the planner's units
    # paid for it; it now loads with the first threshold computed (a plan), as the RDP curves
    # and the Skellam tables load it with their first computation
    probe = (
        "import sys, planner.secagg, planner.units, planner.verify, app.main\n"
        "print(sorted(m for m in sys.modules if m == 'scipy' or m.startswith('scipy.')))\n"
    )
    completed = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert completed.stdout.strip() == "[]"


def test_client_plan_builds_no_other_units_validators(tmp_path: Path) -> None:
    # issue 26 §3: the silo and metric units' models and the service's wire models build
    # their validators on first use, so planning a client scenario does not pay for them
    scenario = Path(__file__).resolve().parents[2] / "examples" / "scenario.json"
    probe = PROBE.replace(
        '"modules": sorted(sys.modules)',
        '"modules": sorted(sys.modules), "built": sorted(f"{m}.{c}" for m in ("planner.units.silo_sample", '
        '"planner.units.metric_local", "planner.service_api") for c, v in vars(sys.modules[m]).items() '
        'if isinstance(v, type) and v.__module__ == m and getattr(v, "__pydantic_complete__", False))',
    )
    out = tmp_path / "modules.json"
    subprocess.run([sys.executable, "-c", probe, str(out), "plan", str(scenario)], capture_output=True, check=True)
    result = json.loads(out.read_text())
    assert result["code"] == 0
    assert result["built"] == []


@pytest.mark.parametrize("name", sorted(cli.SUBCOMMAND_MODULES))
def test_each_subcommand_help_is_its_own_parser(tmp_path: Path, name: str) -> None:
    code, modules = imported(tmp_path, name, "--help")
    assert code == 0
    assert cli.SUBCOMMAND_MODULES[name] in modules
    others = {m for n, m in cli.SUBCOMMAND_MODULES.items() if n != name}
    assert not others & modules
    assert "torch" not in modules  # handlers import torch, parsers never do


def test_every_subcommand_has_a_help_line() -> None:
    assert set(cli.SUBCOMMAND_HELP) == set(cli.SUBCOMMAND_MODULES)
    assert all(cli.SUBCOMMAND_HELP.values())


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--bogus"], None),  # argparse's own refusal
        (["--dataset", "digits", "--model", "mlp"], "plan"),  # no plan at all
        (["--plan", "PLAN", "--model", "mlp"], "dataset"),  # a required option missing
        (["--plan", "PLAN", "--dataset", "digits", "--model", "mlp", "--local-steps", "0"], "local-steps"),
        (["--plan", "PLAN", "--dataset", "digits", "--model", "mlp", "--lr", "-1"], "lr"),
        (["--scenario", "examples/scenario.json", "--method", "gdpfed", "--dataset", "digits", "--model", "mlp",
          "--momentum", "1.5"], "momentum"),
    ],
)
def test_refused_train_exits_before_importing_torch(tmp_path: Path, argv: list[str], field: str | None) -> None:
    # issue 26 §3: a refused gdpfed train paid for torch (3-7 s) before its options were checked
    root = Path(__file__).resolve().parents[2]
    plan = tmp_path / "plan.json"
    scenario = load_scenario(root / "examples" / "scenario.json")
    plan.write_text(json.dumps(make_plan(scenario, "dp_fedavg", clients_needed=False).model_dump(mode="json")))
    args = [str(plan) if a == "PLAN" else a for a in argv]
    completed = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "modules.json"), "train", *args],
        capture_output=True, text=True, check=True, cwd=root,
    )
    result = json.loads((tmp_path / "modules.json").read_text())
    assert result["code"] == 2
    if field is not None:
        assert f"error: {field}:" in completed.stderr
    assert loaded(set(result["modules"]), "torch") == []
    if field not in (None, "plan"):
        # a run option the command line alone gets wrong is refused before the planner (and
        # scipy's interpolation and optimisation) is imported, even beside a scenario to plan
        assert loaded(set(result["modules"]), "planner") == [], field
