"""A process's descendants, read from /proc, for the tests that kill a parent with SIGKILL
and check that nothing it started lives on (docs/architecture.md §Processes).

A process is named by (pid, start time) so that a pid reused after it ended is not taken
for it; a zombie has ended (whoever adopted it may not reap it at once).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

Process = tuple[int, int]  # (pid, start time in clock ticks since boot)


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time) of ``pid``, or None if it does not exist."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2:].split()  # the name may hold spaces and parentheses
    return fields[0], int(fields[1]), int(fields[19])


def descendants(root: int) -> set[Process]:
    """Every live process below ``root`` (children, grandchildren, ...)."""
    parents: dict[int, list[Process]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None and stat[0] != "Z":
            parents.setdefault(stat[1], []).append((int(entry), stat[2]))
    found: set[Process] = set()
    todo = [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child[0])
    return found


def alive(processes: set[Process]) -> set[Process]:
    """Those of ``processes`` that still run."""
    return {(pid, start) for pid, start in processes
            if (stat := _stat(pid)) is not None and stat[2] == start and stat[0] != "Z"}


def wait_for(condition: Callable[[], object], timeout_s: float, what: str, process: subprocess.Popen[bytes]) -> object:
    """Poll ``condition`` until it is true; fail naming ``what`` (and the process's output if it ended)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if process.poll() is not None:
            raise AssertionError(f"the process exited ({process.returncode}) before {what}: {read_output(process)}")
        time.sleep(0.05)
    raise AssertionError(f"no {what} within {timeout_s:g} s")


def read_output(process: subprocess.Popen[bytes]) -> str:
    if process.stdout is None or process.poll() is None:
        return ""
    return process.stdout.read().decode(errors="replace")[-3000:]


def kill_and_check(process: subprocess.Popen[bytes], within_s: float = 5.0) -> set[Process]:
    """SIGKILL ``process``; the descendants it had that are still alive ``within_s`` later.

    The survivors are then killed, so a failing test leaves nothing behind.
    """
    before = descendants(process.pid)
    process.kill()
    process.wait()
    deadline = time.monotonic() + within_s
    while alive(before) and time.monotonic() < deadline:
        time.sleep(0.05)
    survivors = alive(before)
    for pid, _ in survivors:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return survivors
