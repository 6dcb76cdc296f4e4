"""The FastAPI application factory (docs/service.md).

``create_app(settings)`` connects to the database, brings its schema to the newest
Alembic revision, creates the initial operator key when the database has none (printing
its token once on stderr), and wires routes, error handlers, metrics and limits. It has
no module-level app: ``uvicorn --factory app.main:create_app`` or ``gdpfed serve``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio.to_thread
from fastapi import Depends, FastAPI
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline

from app.compute import ComputePool
from app.db import make_engine, session_factory
from app.deps import AppState, refuse_unknown_query_parameters
from app.duplicate_keys import DuplicateKeyMiddleware
from app.errors import error_responses, install_error_handlers
from app.limits import BodySizeLimitMiddleware
from app.metrics import MetricsMiddleware, make_metrics
from app.migrate import upgrade_head
from app.openapi import install_openapi
from app.routes import accounting, console, health, keys, ledger, plans, populations
from app.services.keys import INITIAL_KEY_NAME, ensure_initial_key
from app.settings import Settings

logger = logging.getLogger("gdpfed.app")

API_VERSION = "1"

# every route may answer these; routes declare their own 404 and 409 (app.errors.error_responses)
_ERROR_RESPONSES = error_responses(401, 403, 413, 422, 503)


def bootstrap(settings: Settings) -> tuple[AppState, str | None]:
    """Open the database, migrate it, and create the initial key if there is none."""
    engine = make_engine(settings.database_url, settings.db_busy_timeout_seconds)
    upgrade_head(engine)
    sessions = session_factory(engine)
    initial_token = None
    if settings.initial_key == "create":
        given = settings.initial_api_key.get_secret_value() if settings.initial_api_key else None
        initial_token = ensure_initial_key(sessions, given)
        if initial_token is not None and given is not None:
            # an injected key (GDPFED_INITIAL_API_KEY) is the operator's secret: never echo it
            sys.stderr.write(
                f"gdpfed serve: created operator API key {INITIAL_KEY_NAME!r} from GDPFED_INITIAL_API_KEY "
                "(not shown)\n"
            )
            initial_token = None
    metrics = make_metrics()
    compute = ComputePool(
        settings.compute_workers, settings.compute_timeout_seconds, metrics.compute_timeouts.inc
    )
    return AppState(settings, engine, sessions, metrics, compute), initial_token


def announce_initial_key(token: str) -> None:
    """Print the initial key's token, the one time it is ever shown."""
    sys.stderr.write(
        f"gdpfed serve: created operator API key {INITIAL_KEY_NAME!r}; it is shown only now:\n"
        f"    {token}\n"
        "Send it as 'Authorization: Bearer <key>'. Create more keys with POST /v1/keys or "
        "'gdpfed serve --create-key NAME --role planner'.\n"
    )
    sys.stderr.flush()


def create_app(settings: Settings | None = None, *, announce_key: bool = True) -> FastAPI:
    settings = settings if settings is not None else Settings()
    state, initial_token = bootstrap(settings)
    if initial_token is not None and announce_key:
        announce_initial_key(initial_token)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await anyio.to_thread.run_sync(state.compute.start)
        yield
        state.compute.shutdown()
        state.engine.dispose()

    # /docs and /redoc serve the Swagger UI / ReDoc assets from the installed package, not a
    # CDN, so the docs work on an air-gapped network (issue 9 §5)
    app = FastAPIOffline(
        title="gdpfed planning service",
        version=API_VERSION,
        summary="Privacy-budget planning for federated learning with heterogeneous "
        "client-level differential privacy (GDPFed+).",
        description="Plans, populations (budget registry), the privacy ledger and "
        "accounting. Authenticate with an API key: `Authorization: Bearer <key>` or "
        "`X-API-Key: <key>`. Errors are JSON `{code, message, field?}`.",
        lifespan=lifespan,
        responses=_ERROR_RESPONSES,
        # one schema per model, not pydantic's -Input/-Output pair with one title (a
        # generated client would drop the duplicates and the responses that use them)
        separate_input_output_schemas=False,
        # operationId = the route function's name (create_plan, get_ledger, ...): a generated
        # client's function names, instead of FastAPI's create_plan_v1_plans_post
        generate_unique_id_function=lambda route: route.name,
        dependencies=[Depends(refuse_unknown_query_parameters)],
    )
    app.state.gdpfed = state
    # /healthz takes no key, and /metrics none unless GDPFED_METRICS_REQUIRE_KEY (app.routes.health)
    open_operations = [("get", "/healthz")] + ([] if settings.metrics_require_key else [("get", "/metrics")])
    install_openapi(app, open_operations)
    install_error_handlers(app)
    app.add_middleware(DuplicateKeyMiddleware)  # inside the size limit: reads a bounded body
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_request_bytes)
    app.add_middleware(MetricsMiddleware, metrics=state.metrics)
    for module in (health, accounting, plans, ledger, populations, keys, console):
        app.include_router(module.router)
    # the console's script, style and vendored chart library, from the installed package
    app.mount("/console/static", StaticFiles(directory=console.STATIC_DIR), name="console-static")
    return app
