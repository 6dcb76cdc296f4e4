"""Bounded, time-limited execution of CPU-heavy work in worker processes (docs/service.md §Limits).

Accounting and planning run in a pool of worker *processes*, so computations use every
core instead of taking turns on one interpreter's GIL, and the event loop and the threads
that serve database requests stay responsive while they run. The caller waits at most
``timeout_seconds`` (queueing for a free worker included); past it the request is
answered 503 ``timeout`` and the worker that was computing is **killed** with every
process it started (a PRV child, say) and replaced, so an abandoned computation no longer
slows the requests after it. The ``gdpfed_compute_timeouts`` metric counts timeouts.

Workers come from a ``forkserver`` that has imported the planner and the accountants once:
a new worker (at start, or to replace a killed one) is a fork of that clean,
single-threaded process, ready in milliseconds, and never a fork of the threaded server.
What crosses the process boundary is pickled: the function (a module-level one), its
arguments and its result. Errors come back as the same types (``GdpfedError`` subclasses
with their fields; a pydantic ``ValidationError`` as ``InvalidInputError`` naming the
first field), so the HTTP mapping in ``app/errors.py`` is unchanged.
"""

from __future__ import annotations

import functools
import logging
import multiprocessing
import os
import pickle
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, TypeVar

import anyio.to_thread
import pydantic

from accounting.errors import InvalidInputError, out_of_float_range, validation_error_line
from accounting.processes import exit_when_closed
from app.errors import compute_timeout

logger = logging.getLogger("gdpfed.app")

T = TypeVar("T")

# Imported once by the forkserver, so every worker starts with them loaded (the planner's
# modules by name: the package itself imports them on first use, planner/__init__.py).
PRELOAD = ("numpy", "scipy.optimize", "accounting", "planner.loading", "planner.sweep", "planner.plan", "planner.replan",
           "accounting.requests", "app.compute")
# How long a killed or retired worker may take to exit before it is left to the OS.
_JOIN_SECONDS = 5.0


def default_workers() -> int:
    """One worker per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _guarded(fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    """Run ``fn``; floating-point range errors become a 422 ``infeasible`` answer.

    Inputs at the edge of the schema's domains (subnormal rates, astronomically many
    clients) can drive the numerics out of range. That is a property of the request, not
    a server fault, so it is answered 422 rather than 500; it is logged with the
    traceback so that a numerical weakness behind it can still be fixed.
    """
    try:
        return fn(*args, **kwargs)
    except ArithmeticError as exc:
        logger.warning("computation %s out of floating-point range", getattr(fn, "__name__", fn), exc_info=True)
        raise out_of_float_range(exc) from None


class WorkerCrashed(RuntimeError):
    """A worker process died while computing (killed by the OS, a crash in native code)."""


# --- crossing the process boundary ---------------------------------------------------------


def _portable_error(exc: BaseException) -> tuple[str, Any]:
    """An exception as something that survives pickling, to be rebuilt by :func:`_rebuild_error`."""
    if isinstance(exc, pydantic.ValidationError):
        field, message = validation_error_line(exc.errors(include_url=False))
        exc = InvalidInputError(field or "input", message)
    try:
        pickle.loads(pickle.dumps(exc))
        return "exception", exc
    except Exception:  # any failure to round-trip means: send its state instead
        pass
    state = {key: value for key, value in vars(exc).items() if _picklable(value)}
    if isinstance(exc, Exception) and _picklable(type(exc)):
        return "state", (type(exc), str(exc), state)
    return "crash", "".join(traceback.format_exception(exc))


def _picklable(value: object) -> bool:
    try:
        pickle.dumps(value)
        return True
    except Exception:
        return False


def _rebuild_error(kind: str, payload: Any) -> BaseException:
    if kind == "exception":
        return payload
    if kind == "state":
        cls, message, state = payload
        error = cls.__new__(cls)
        Exception.__init__(error, message)
        error.__dict__.update(state)
        return error
    return RuntimeError(f"computation failed in a worker process:\n{payload}")


def _worker_main(connection: Connection) -> None:
    """A worker: receive ``(fn, args, kwargs)``, send back ``("ok", result)`` or the error."""
    # Its own process group: killing the group on a timeout also ends the PRV children it
    # forked (accounting.prv.run_isolated), which would otherwise compute on, orphaned.
    os.setsid()
    # It serves the server, but its parent is the forkserver, which lives as long as any
    # worker does: so the worker watches its pipe to the server, and when the server dies
    # (a kill -9 included) it ends itself and its group at once instead of computing on
    # for nobody (docs/architecture.md §Processes).
    exit_when_closed(connection.fileno(), kill_group=True)
    # Daemonic to its parent (it dies with the server), but it may start children itself:
    # PRV runs in fenced child processes (accounting.prv.run_isolated).
    multiprocessing.current_process().daemon = False
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the server, which retires us
    while True:
        try:
            task = connection.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        fn, args, kwargs = task
        try:
            reply: tuple[str, Any] = ("ok", _guarded(fn, *args, **kwargs))
        except BaseException as exc:  # every error goes back to the caller
            reply = _portable_error(exc)
        try:
            connection.send(reply)
        except Exception as exc:  # an unpicklable result is a bug: report it
            connection.send(_portable_error(exc))


class _Worker:
    def __init__(self, context: Any) -> None:
        parent, child = context.Pipe(duplex=True)
        self.process = context.Process(target=_worker_main, args=(child,), name="gdpfed-compute", daemon=True)
        self.process.start()
        child.close()
        self.connection: Connection = parent

    def kill(self) -> None:
        """SIGKILL the worker and everything in its process group."""
        pid = self.process.pid
        if pid is not None:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.process.kill()
        self.process.join(_JOIN_SECONDS)
        self.connection.close()

    def retire(self) -> None:
        try:
            self.connection.send(None)
        except OSError:
            pass
        self.process.join(_JOIN_SECONDS)
        if self.process.is_alive():
            self.kill()
        else:
            self.connection.close()


class ComputePool:
    """A fixed number of worker processes with a per-call time limit; overrunning workers are killed."""

    def __init__(self, workers: int, timeout_seconds: float, on_timeout: Callable[[], None] | None = None) -> None:
        self.workers = workers
        self.timeout_seconds = timeout_seconds
        self._on_timeout = on_timeout
        self._lock = threading.Lock()
        self._idle: queue.Queue[_Worker] | None = None
        self._all: set[_Worker] = set()  # idle and busy, so shutdown can end them all
        self._context: Any = None

    def start(self) -> None:
        """Start the workers now (the server does at startup, so no request waits for them)."""
        self._start()

    def _start(self) -> queue.Queue[_Worker]:
        # Started on first use and again after shutdown(), so an app whose lifespan ends and
        # starts again (tests, servers that reload) keeps working.
        with self._lock:
            if self._idle is None:
                context = multiprocessing.get_context("forkserver")
                context.set_forkserver_preload(list(PRELOAD))
                self._context = context
                idle: queue.Queue[_Worker] = queue.Queue()
                for _ in range(self.workers):
                    worker = _Worker(context)
                    self._all.add(worker)
                    idle.put(worker)
                self._idle = idle
            return self._idle

    def worker_pids(self) -> list[int]:
        """Process ids of the idle workers (for tests and diagnostics)."""
        idle = self._idle
        if idle is None:
            return []
        with idle.mutex:
            return [w.process.pid for w in list(idle.queue) if w.process.pid is not None]

    def run(self, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
        """``fn(*args, **kwargs)`` in a worker; its exception, or 503 after the time limit."""
        return self._run(time.monotonic() + self.timeout_seconds, fn, args, kwargs)

    async def run_async(self, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
        """``run`` for async routes: the wait happens on a thread, never on the event loop."""
        deadline = time.monotonic() + self.timeout_seconds
        call = functools.partial(self._run, deadline, fn, args, kwargs)
        return await anyio.to_thread.run_sync(call)

    def _run(self, deadline: float, fn: Callable[..., T], args: tuple[object, ...], kwargs: dict[str, object]) -> T:
        idle = self._start()
        try:
            worker = idle.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            self._timed_out()
        try:
            worker.connection.send((fn, args, kwargs))
        except Exception:
            idle.put(worker)  # an unpicklable task is the caller's bug; the worker is fine
            raise
        try:
            ready = worker.connection.poll(max(0.0, deadline - time.monotonic()))
            if ready:
                kind, payload = worker.connection.recv()
        except (EOFError, OSError):
            self._replace(idle, worker)
            raise WorkerCrashed(f"a compute worker died while running {getattr(fn, '__name__', fn)}") from None
        if not ready:
            # Abandoned work must not keep a core busy for the requests after it.
            self._replace(idle, worker)
            self._timed_out()
        idle.put(worker)
        if kind == "ok":
            return payload
        raise _rebuild_error(kind, payload)

    def _replace(self, idle: queue.Queue[_Worker], worker: _Worker) -> None:
        worker.kill()
        with self._lock:
            self._all.discard(worker)
            if self._idle is idle:  # not shut down meanwhile
                fresh = _Worker(self._context)
                self._all.add(fresh)
                idle.put(fresh)

    def _timed_out(self) -> Any:
        if self._on_timeout is not None:
            self._on_timeout()
        raise compute_timeout(self.timeout_seconds)

    def shutdown(self) -> None:
        """End every worker: idle ones exit cleanly, busy ones (their callers gave up) are killed."""
        with self._lock:
            idle, self._idle = self._idle, None
            workers, self._all = self._all, set()
        if idle is None:
            return
        resting = set()
        while True:
            try:
                resting.add(idle.get_nowait())
            except queue.Empty:
                break
        for worker in workers:
            if worker in resting:
                worker.retire()
            else:
                worker.kill()
