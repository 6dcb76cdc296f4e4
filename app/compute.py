"""Bounded, time-limited execution of CPU-heavy work (docs/service.md §Limits).

Accounting and planning run on a small dedicated thread pool, never on the event loop
and never on the pool that serves database requests. The caller waits at most
``timeout_seconds`` (queueing included); past it the request is answered 503
``timeout``. Python cannot kill a thread, so a computation that overruns finishes in
the background and its result is dropped; the pool's size bounds how many such
computations can run at once, and the ``gdpfed_compute_timeouts`` metric counts them.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import TypeVar

from app.errors import compute_timeout

T = TypeVar("T")


class ComputePool:
    """A fixed-size thread pool with a per-call time limit."""

    def __init__(self, workers: int, timeout_seconds: float, on_timeout: Callable[[], None] | None = None) -> None:
        self.timeout_seconds = timeout_seconds
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="gdpfed-compute"
        )
        self._on_timeout = on_timeout

    def run(self, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
        """``fn(*args, **kwargs)`` on the pool; its exception, or 503 after the time limit."""
        future = self._executor.submit(fn, *args, **kwargs)
        try:
            return future.result(timeout=self.timeout_seconds)
        except concurrent.futures.TimeoutError:
            future.cancel()  # drops it if it has not started yet
            if self._on_timeout is not None:
                self._on_timeout()
            raise compute_timeout(self.timeout_seconds) from None

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
