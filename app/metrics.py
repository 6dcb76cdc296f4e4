"""Prometheus metrics with one registry per app (docs/service.md §Operations).

Each ``create_app`` builds its own ``CollectorRegistry``, so two apps in one process
(tests) never share or clash over counters. Requests are labelled with the route
*template* (``/v1/plans/{plan_id}``), never the raw path, so ids cannot blow up the
number of series; unmatched paths share the label ``unmatched``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(frozen=True)
class Metrics:
    registry: CollectorRegistry
    requests: Counter
    latency: Histogram
    plans_created: Counter
    ledger_updates: Counter
    compute_timeouts: Counter

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def make_metrics() -> Metrics:
    registry = CollectorRegistry(auto_describe=True)
    return Metrics(
        registry=registry,
        requests=Counter(
            "gdpfed_http_requests", "HTTP requests by route template, method and status",
            ["route", "method", "status"], registry=registry,
        ),
        latency=Histogram(
            "gdpfed_http_request_duration_seconds", "HTTP request latency by route template",
            ["route", "method", "status"], buckets=_LATENCY_BUCKETS, registry=registry,
        ),
        plans_created=Counter(
            "gdpfed_plans_created", "plans stored, by kind (new, replan, population)",
            ["kind"], registry=registry,
        ),
        ledger_updates=Counter(
            "gdpfed_ledger_updates", "rounds reported to the ledger (duplicate = idempotent repeat)",
            ["result"], registry=registry,
        ),
        compute_timeouts=Counter(
            "gdpfed_compute_timeouts", "accounting or planning computations past the time limit",
            registry=registry,
        ),
    )


class MetricsMiddleware:
    """Pure ASGI middleware: counts requests and times them by route template and status."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route: Any = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            method = scope.get("method", "")
            labels = (template, method if method in _METHODS else "other", str(status["code"]))
            self.metrics.requests.labels(*labels).inc()
            self.metrics.latency.labels(*labels).observe(time.perf_counter() - start)
