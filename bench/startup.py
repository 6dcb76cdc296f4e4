"""``gdpfed bench cli``: wall time of each ``gdpfed`` subcommand against ``python -c pass``.

Every command runs as a fresh process (the installed ``gdpfed`` script beside this
Python, or ``python -m app.cli``), round-robin, so that load on a shared machine hits
all of them alike; each row is the median of the repeats and its ratio to the median of
``python -c pass`` (the interpreter's own start). Subcommands are timed on ``--help``
(parsing only: what every call of the subcommand pays before its work),
``account epsilon`` on a real answer of the default accountant, each other question
(``noise-multiplier``, ``rounds``, ``sampling-rate``) and ``epsilon`` under rdp (and one
refused for a bad value, exit 2 before any accountant loads), ``plan examples/scenario.json`` on a whole plan
with its predictions (beside the third-party imports it cannot start without: numpy, pydantic and
scipy.optimize) and a ``train`` refused for a bad option (exit 2 before the trainer
loads; issue 26 §3). Beside the wall seconds, ``cpu_s`` is the median CPU time (user +
system) of the command's process, which a machine shared with other work inflates less
than the wall time. The load average is printed in the title.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.report import median

ACCOUNT_EPSILON = [
    "account", "epsilon", "--sampling-rate", "0.01", "--noise-multiplier", "1.1", "--rounds", "1000",
    "--delta", "1e-5",
]
# refused by the request model (sampling_rate is not a number): exit 2, one line
ACCOUNT_REFUSED = ["account", "epsilon", "--sampling-rate", "abc", *ACCOUNT_EPSILON[4:]]
# every other question of issue 26 §3's 0.25 s target: the README's noise multiplier, the most
# rounds and the largest rate at epsilon 1, and the epsilon above under rdp (rdp's gammaln and
# log_ndtr, accounting/special.py; pld's rate search starts from rdp's rate)
ACCOUNT_QUESTIONS = {
    "gdpfed account noise-multiplier ...": [
        "account", "noise-multiplier", "--sampling-rate", "0.1", "--rounds", "100", "--epsilon", "1", "--delta", "1e-3",
    ],
    "gdpfed account rounds ...": [
        "account", "rounds", "--sampling-rate", "0.01", "--noise-multiplier", "1", "--epsilon", "1", "--delta", "1e-5",
    ],
    "gdpfed account sampling-rate ...": [
        "account", "sampling-rate", "--noise-multiplier", "1", "--rounds", "100", "--epsilon", "1", "--delta", "1e-5",
    ],
    "gdpfed account epsilon ... --accountant rdp": [*ACCOUNT_EPSILON, "--accountant", "rdp"],
}
EXAMPLE_SCENARIO = str(Path(__file__).resolve().parents[1] / "examples" / "scenario.json")
PLAN_EXAMPLE = ["plan", EXAMPLE_SCENARIO]
PLAN_IMPORTS = "import numpy, pydantic, scipy.optimize"
# refused by TrainConfig (lr must be > 0): exit 2, one line, no torch
TRAIN_REFUSED = [
    "train", "--scenario", EXAMPLE_SCENARIO, "--method", "gdpfed", "--dataset", "digits", "--model", "mlp",
    "--lr", "-1",
]
# commands expected to exit with another status than 0
EXIT_CODES = {"gdpfed train (refused: --lr -1)": 2, "gdpfed account epsilon (refused: --sampling-rate abc)": 2}


def gdpfed_command() -> list[str]:
    """The installed ``gdpfed`` script of this environment, else ``python -m app.cli``."""
    script = Path(sys.executable).parent / "gdpfed"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "app.cli"]


def commands() -> list[tuple[str, list[str]]]:
    from app.cli import SUBCOMMAND_MODULES

    gdpfed = gdpfed_command()
    rows = [("python -c pass", [sys.executable, "-c", "pass"]), ("gdpfed --help", [*gdpfed, "--help"])]
    rows.append(("gdpfed account epsilon ...", [*gdpfed, *ACCOUNT_EPSILON]))
    rows += [(name, [*gdpfed, *argv]) for name, argv in ACCOUNT_QUESTIONS.items()]
    rows.append(("gdpfed account epsilon (refused: --sampling-rate abc)", [*gdpfed, *ACCOUNT_REFUSED]))
    # what `gdpfed plan` imports before any of the project's code runs: the allocation's SLSQP
    # polish needs scipy.optimize (issue 26 §2's floor under its 0.6 s target)
    rows.append(("python -c 'import numpy, pydantic, scipy.optimize'", [sys.executable, "-c", PLAN_IMPORTS]))
    rows.append(("gdpfed plan examples/scenario.json", [*gdpfed, *PLAN_EXAMPLE]))
    rows.append(("gdpfed train (refused: --lr -1)", [*gdpfed, *TRAIN_REFUSED]))
    rows += [(f"gdpfed {name} --help", [*gdpfed, name, "--help"]) for name in SUBCOMMAND_MODULES]
    return rows


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def run(quick: bool) -> list[tuple[str, list[dict[str, Any]]]]:
    repeats = 1 if quick else 10
    timed = commands()
    seconds: dict[str, list[float]] = {name: [] for name, _ in timed}
    cpu: dict[str, list[float]] = {name: [] for name, _ in timed}
    load = load_average()
    for _ in range(repeats):
        for name, argv in timed:
            start = time.perf_counter()
            child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _, status, usage = os.wait4(child.pid, 0)
            seconds[name].append(time.perf_counter() - start)
            cpu[name].append(usage.ru_utime + usage.ru_stime)
            code = os.waitstatus_to_exitcode(status)
            if code != EXIT_CODES.get(name, 0):
                raise RuntimeError(f"{name}: exit {code}, expected {EXIT_CODES.get(name, 0)}")
    baseline = median(seconds["python -c pass"])
    rows = [
        {
            "command": name,
            "median_s": median(values),
            "min_s": min(values),
            "ratio_to_python": median(values) / baseline,
            "cpu_s": median(cpu[name]),
            "repeats": len(values),
        }
        for name, values in seconds.items()
    ]
    # without bytecode on disk every start compiles the project's modules again (0.03-0.1 s);
    # an installed copy has its bytecode, so compare numbers taken with it (compileall first)
    compiled = "not written (PYTHONDONTWRITEBYTECODE)" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "cached"
    return [(f"CLI start-up: wall seconds per call (load average {load} before the run; bytecode {compiled})", rows)]
