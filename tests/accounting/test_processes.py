"""Children end with the process they serve (accounting/processes.py, docs/architecture.md §Processes)."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from accounting.processes import die_with_parent, exit_when_closed
from tests.process_tree import descendants, kill_and_check, wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process death signals are Linux's")

ROOT = Path(__file__).resolve().parents[2]


def _orphaned_at_start(parent: int) -> None:
    die_with_parent(parent)  # a parent that is already gone: the child must not go on
    time.sleep(60)


def test_a_child_whose_parent_is_already_gone_exits_at_once():
    context = multiprocessing.get_context("fork")
    # this process stands for a parent that died before the child armed its death signal
    not_the_parent = os.getppid()
    child = context.Process(target=_orphaned_at_start, args=(not_the_parent,))
    child.start()
    child.join(10)
    assert not child.is_alive()
    assert child.exitcode == 1


def _serve(parents_end: Connection, fd: int) -> None:
    parents_end.close()  # the fork copied it: only the parent may hold it
    exit_when_closed(fd)
    time.sleep(60)


def test_a_child_exits_when_the_other_end_of_its_pipe_closes():
    context = multiprocessing.get_context("fork")
    ours, theirs = context.Pipe()
    child = context.Process(target=_serve, args=(ours, theirs.fileno()))
    child.start()
    theirs.close()
    ours.send("a message does not end it")
    child.join(1)
    assert child.is_alive()
    ours.close()  # what the kernel does when this process dies
    child.join(10)
    assert not child.is_alive()


PRV_CALL = """
import time
from accounting import prv
prv.run_isolated(time.sleep, (120,), 300.0)
"""


def test_a_prv_child_dies_with_its_parent():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    parent = subprocess.Popen([sys.executable, "-c", PRV_CALL], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: descendants(parent.pid), 60, "a PRV child", parent)
        assert kill_and_check(parent) == set()
    finally:
        parent.kill()
        parent.wait()
