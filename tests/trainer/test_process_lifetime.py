"""A trainer killed with SIGKILL leaves no process behind (docs/architecture.md §Processes):
its secure-aggregation workers and an experiment's cell workers end within 5 s."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.process_tree import descendants, kill_and_check, wait_for
from tests.trainer.test_cli import TINY, plan_file  # noqa: F401
from tests.trainer.test_secagg_workers import EXPERIMENT
from trainer.secagg import parallel
from trainer.secagg.params import choose_params
from trainer.secagg.protocol import new_session

pytestmark = pytest.mark.skipif(not parallel.fork_available(), reason="secure-aggregation workers fork on Linux only")

ROOT = Path(__file__).resolve().parents[2]

# gdpfed train with every session forked over 3 processes (as test_secagg_workers forces it),
# where the driver's own slice of share_keys takes a minute: its 2 workers answer, then wait
# on their pipes for the next request, which is where a kill -9 of the driver left one for good.
TRAIN_MID_SESSION = """
import os, sys, time
from trainer.secagg import parallel
parallel.PARALLEL_MIN_SECONDS = 0.0
parallel.available_workers = lambda: 3
driver = os.getpid()
share_keys = parallel.Client.share_keys
def slow_in_driver(self, roster):
    if os.getpid() == driver:
        time.sleep(120)
    return share_keys(self, roster)
parallel.Client.share_keys = slow_in_driver
from app.cli import main
main(sys.argv[1:])
"""


def start(argv: list[str]) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_a_killed_trainer_leaves_no_secure_aggregation_worker(tmp_path, plan_file):  # noqa: F811
    trainer = start([sys.executable, "-c", TRAIN_MID_SESSION, "train", "--plan", str(plan_file), *TINY,
                     "--rounds", "2", "--out", str(tmp_path / "run")])
    try:
        wait_for(lambda: len(descendants(trainer.pid)) >= 2, 180, "2 secure-aggregation workers", trainer)
        assert kill_and_check(trainer) == set()
    finally:
        trainer.kill()
        trainer.wait()


def test_a_killed_experiment_leaves_no_cell_worker(tmp_path):
    config = tmp_path / "exp.yaml"
    config.write_text(EXPERIMENT)
    out = tmp_path / "out"
    runner = start([sys.executable, "-m", "app.cli", "experiment", str(config), "--smoke", "--jobs", "2",
                    "--out", str(out)])
    try:
        # mid-cell: both cells have started training in their worker processes
        wait_for(lambda: len(list((out / "runs").glob("*"))) >= 2, 240, "two cells under way", runner)
        assert kill_and_check(runner) == set()
    finally:
        runner.kill()
        runner.wait()


def test_no_worker_holds_the_drivers_end_of_a_pipe():
    """Each worker's pipe has its far end in the driver alone, so a worker reading it sees
    EOF when the driver dies, even where no death signal can be armed."""
    ids = list(range(6))
    params = choose_params(len(ids), 4, 1.0)
    vectors = {u: np.zeros(8) for u in ids}
    clients = parallel.ForkedClients(vectors, ids, params, new_session(ids, params, 0), seed=0, workers=3)
    try:
        driver_ends = {f"socket:[{os.fstat(c.fileno()).st_ino}]" for c in clients._connections}
        for process in clients._processes:
            fd_dir = Path(f"/proc/{process.pid}/fd")
            held = {os.readlink(fd_dir / fd) for fd in os.listdir(fd_dir)}
            assert not held & driver_ends, f"worker {process.pid} holds {held & driver_ends}"
    finally:
        clients.close()
