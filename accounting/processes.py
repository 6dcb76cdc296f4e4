"""Child processes that end when their parent does (docs/architecture.md §Processes).

Every process the project starts (secure-aggregation workers, experiment cells, PRV
jobs, the service's compute workers) must end within moments of its parent, however the
parent ends: a ``kill -9`` runs no ``finally`` and no ``atexit``, so a child that waits
for a message or a ``join`` from its parent would wait forever, reparented to init. Two
mechanisms, used together where they apply:

- :func:`die_with_parent`: the kernel sends the child SIGKILL when its parent dies
  (Linux ``PR_SET_PDEATHSIG``). For children whose parent is the process to follow.
- :func:`exit_when_closed`: a thread that ends the process when the other end of its
  pipe or socket to the process it serves closes, which the kernel does when that
  process dies. For children whose parent is not that process (a ``forkserver``'s
  workers) and as the portable second line where prctl does not exist.

This module sits in ``accounting`` only because it is the bottom layer every other
package may import (``docs/architecture.md`` §Dependency direction).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
from collections.abc import Callable

# <linux/prctl.h>
_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    """libc's ``prctl`` (Linux), or None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


# Looked up when the module is imported, in the parent: a child forked from a process
# with other threads must not dlopen (one of them may have held the loader's lock).
_PRCTL = _load_prctl()


def die_with_parent(parent: int) -> bool:
    """Make the kernel SIGKILL this process when ``parent`` dies; exit now if it already has.

    Call it first thing in a child, with the parent's pid read *in the parent* before it
    started the child (``os.getppid()`` in the child is no witness: if the parent died
    before the call, the child was already reparented and getppid names the new parent).
    The death signal is armed, then the parent is checked: a parent that died between the
    child's start and the prctl call is caught by the check, one that dies after it by the
    signal.

    Linux delivers the signal when the *thread* that started the child exits, not the
    process: the caller must start children from a thread that outlives them (each call
    site starts and ends its children within one function call). Elsewhere (not Linux,
    or prctl refused) nothing is armed and False is returned; the caller's pipe to the
    parent (:func:`exit_when_closed`, an ``EOFError``) is then what ends the child.
    """
    armed = _PRCTL is not None and _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    if os.getppid() != parent:
        os._exit(1)  # orphaned before the signal was armed: nothing to serve, nothing to clean
    return armed


def exit_when_closed(fd: int, *, kill_group: bool = False) -> threading.Thread:
    """Start a daemon thread that ends this process (``os._exit``) once the peer of ``fd`` closes.

    With ``kill_group`` it SIGKILLs this process's group instead, which ends every process
    started here that did not arm a death signal (a subprocess); this process must then
    lead its own group (``os.setsid()``), or the group would be its parent's.

    ``fd`` is this process's end of a socket pair (``multiprocessing.Pipe()``) whose other
    end only the watched process holds. The thread polls for the peer's hang-up alone
    (``POLLRDHUP``; ``POLLHUP`` and ``POLLERR`` always report), so messages arriving on
    ``fd`` never wake it and the process's own reads are undisturbed; the kernel closes
    the peer's end when the watched process dies, even by SIGKILL. Children this process
    started with :func:`die_with_parent` end with it.
    """
    def watch() -> None:
        poller = select.poll()
        poller.register(fd, getattr(select, "POLLRDHUP", 0))
        while True:
            try:
                events = poller.poll()
            except InterruptedError:  # pragma: no cover - retried by Python since 3.5
                continue
            if events:
                if kill_group:
                    os.killpg(os.getpgrp(), signal.SIGKILL)
                os._exit(1)

    thread = threading.Thread(target=watch, name="gdpfed-parent-watch", daemon=True)
    thread.start()
    return thread
