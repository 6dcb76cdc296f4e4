"""Bounded, time-limited execution of CPU-heavy work (docs/service.md §Limits).

Accounting and planning run on a small dedicated thread pool, never on the event loop
and never on the pool that serves database requests. The caller waits at most
``timeout_seconds`` (queueing included); past it the request is answered 503
``timeout``. Python cannot kill a thread, so a computation that overruns finishes in
the background and its result is dropped; the pool's size bounds how many such
computations can run at once, and the ``gdpfed_compute_timeouts`` metric counts them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from accounting.errors import InfeasibleError
from app.errors import compute_timeout

logger = logging.getLogger("gdpfed.app")

T = TypeVar("T")


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
        raise InfeasibleError(
            f"the computation left the floating-point range for these inputs ({type(exc).__name__}); "
            "use values of ordinary magnitude"
        ) from None


class ComputePool:
    """A fixed-size thread pool with a per-call time limit."""

    def __init__(self, workers: int, timeout_seconds: float, on_timeout: Callable[[], None] | None = None) -> None:
        self.workers = workers
        self.timeout_seconds = timeout_seconds
        self._on_timeout = on_timeout
        self._lock = threading.Lock()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    def _pool(self) -> concurrent.futures.ThreadPoolExecutor:
        # Created on first use and again after shutdown(), so an app whose lifespan ends
        # and starts again (tests, servers that reload) keeps working.
        with self._lock:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self.workers, thread_name_prefix="gdpfed-compute"
                )
            return self._executor

    def run(self, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
        """``fn(*args, **kwargs)`` on the pool; its exception, or 503 after the time limit."""
        future = self._pool().submit(_guarded, fn, *args, **kwargs)
        try:
            return future.result(timeout=self.timeout_seconds)
        except concurrent.futures.TimeoutError:
            future.cancel()  # drops it if it has not started yet
            if self._on_timeout is not None:
                self._on_timeout()
            raise compute_timeout(self.timeout_seconds) from None

    async def run_async(self, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
        """``run`` for async routes: awaits the pool without holding a server thread."""
        future = self._pool().submit(_guarded, fn, *args, **kwargs)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), self.timeout_seconds)
        except TimeoutError:
            future.cancel()
            if self._on_timeout is not None:
                self._on_timeout()
            raise compute_timeout(self.timeout_seconds) from None

    def shutdown(self) -> None:
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
