"""Stops a local federation's processes when ``gdpfed flower local`` dies without stopping them (docs/flower.md §3).

``LocalFederation`` starts the SuperLink, the SuperNodes, the SuperExec and ``flwr run``
each in its own session, out of reach of the signals sent to gdpfed, and stops them by
process group in ``stop()``. A gdpfed killed with SIGKILL runs no ``stop()``: the groups
would run on, reparented to init. So the federation starts this keeper first, in a session
of its own, with the read end of a pipe as its stdin; gdpfed writes ``+PGID`` for each
group it starts and ``done`` once ``stop()`` has ended them all. The kernel closes the
pipe when gdpfed dies, however it dies: at end-of-file the keeper sends SIGTERM to every
group not yet done, and SIGKILL to those still there ``GRACE_S`` later
(docs/architecture.md §Processes).

Run: ``python -m trainer.flower.keeper`` (stdin: the pipe); it imports nothing heavy.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterable

# How long the groups get to stop on SIGTERM before SIGKILL (within the few seconds in
# which every process must end once gdpfed has).
GRACE_S = 2.0


def read_groups(lines: Iterable[str]) -> set[int]:
    """The groups left to stop once ``lines`` end: each ``+PGID``, forgotten at ``done``."""
    groups: set[int] = set()
    for line in lines:
        word = line.strip()
        if word == "done":
            groups.clear()
        elif word.startswith("+") and word[1:].isdigit():
            groups.add(int(word[1:]))
    return groups


def stop_groups(groups: set[int], grace_s: float = GRACE_S) -> None:
    """SIGTERM every group, then SIGKILL those that still have a process after ``grace_s``."""
    for group in groups:
        _signal(group, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_signal(group, 0) for group in groups):
        time.sleep(0.05)
    for group in groups:
        _signal(group, signal.SIGKILL)


def _signal(group: int, signum: int) -> bool:
    try:
        os.killpg(group, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def main() -> None:
    # Signals meant for gdpfed are gdpfed's to handle (it stops the groups and says done).
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    stop_groups(read_groups(sys.stdin))


if __name__ == "__main__":
    main()
