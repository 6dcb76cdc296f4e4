"""The service's compute processes end with the server, however it ends (docs/architecture.md §Processes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.process_tree import Process, descendants, kill_and_check, wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the forkserver and /proc are Linux's here")

ROOT = Path(__file__).resolve().parents[2]

# A server's pool with one idle worker and one that runs a two-minute subprocess, as a
# long planning call would compute: the forkserver, both workers and the subprocess are
# descendants of this process.
BUSY_POOL = """
import subprocess
from app.compute import ComputePool
pool = ComputePool(workers=2, timeout_seconds=300)
pool.start()
pool.run(subprocess.run, ["sleep", "120"])
"""


def _is_sleep(process: Process) -> bool:
    try:
        return Path(f"/proc/{process[0]}/cmdline").read_bytes().split(b"\0")[0] == b"sleep"
    except FileNotFoundError:
        return False


def test_a_killed_server_leaves_no_compute_process():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    server = subprocess.Popen([sys.executable, "-c", BUSY_POOL], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: any(_is_sleep(p) for p in descendants(server.pid)), 120, "a busy compute worker", server)
        assert kill_and_check(server) == set()
    finally:
        server.kill()
        server.wait()
