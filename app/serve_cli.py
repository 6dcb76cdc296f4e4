"""``gdpfed serve``: run the planning service with uvicorn (docs/service.md §Running).

``--create-key NAME --role ROLE`` instead creates one API key in the database, prints
its token once, and exits.

The project's imports are inside the handlers, for start-up time: building this parser
(``gdpfed serve --help``) loads no accounting, SQLAlchemy, FastAPI or uvicorn.
"""

from __future__ import annotations

import argparse
from typing import Any

from app.security import ROLES


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        description="Run the gdpfed planning service. Settings come from GDPFED_* environment "
        "variables (docs/service.md); the flags here override them.",
    )
    parser.add_argument("--host", default=None, help="interface to bind (default 127.0.0.1, GDPFED_HOST)")
    parser.add_argument("--port", type=int, default=None, help="port (default 8000, GDPFED_PORT)")
    parser.add_argument("--database-url", default=None,
                        help="SQLAlchemy URL (default sqlite:///./gdpfed.db, GDPFED_DATABASE_URL)")
    parser.add_argument("--log-level", default=None, choices=["debug", "info", "warning", "error", "critical"])
    parser.add_argument("--workers", type=int, default=None,
                        help="server processes sharing the port (default 1, GDPFED_WORKERS); the database is "
                        "their only shared state")
    parser.add_argument("--compute-workers", type=int, default=None,
                        help="compute processes per server process (default: the cores divided among the "
                        "server processes, GDPFED_COMPUTE_WORKERS)")
    parser.add_argument("--create-key", metavar="NAME", default=None,
                        help="create an API key NAME, print its token once, and exit")
    parser.add_argument("--role", choices=ROLES, default="planner", help="role of --create-key (default planner)")
    parser.add_argument("--json", action="store_true", help="with --create-key: print the key as JSON")
    parser.set_defaults(handler=handle)


def settings_from_args(args: argparse.Namespace) -> Any:
    from app.settings import Settings

    overrides = {
        name: value
        for name, value in (("host", args.host), ("port", args.port), ("database_url", args.database_url),
                            ("log_level", args.log_level), ("workers", args.workers),
                            ("compute_workers", args.compute_workers))
        if value is not None
    }
    return Settings(**overrides)


def handle(args: argparse.Namespace) -> tuple[Any, str] | None:
    settings = settings_from_args(args)
    if args.create_key is not None:
        return _create_key(settings, args.create_key, args.role)
    _serve(settings)
    return None


# The options a key's fields are given with: its errors name the option, as every gdpfed error
# names what the user typed (docs/architecture.md §Errors), not KeyCreate's field.
KEY_OPTIONS = {"name": "create-key", "role": "role"}


def _create_key(settings: Any, name: str, role: str) -> tuple[Any, str]:
    """``--create-key NAME --role ROLE`` (docs/service.md §Running): the key validated as ``POST
    /v1/keys`` validates it, created in the database, its token returned to be printed once. An
    invalid or taken name is one line naming ``create-key``."""
    import pydantic

    from accounting.errors import InvalidInputError, validation_error_line
    from app.db import make_engine, session_factory
    from app.errors import ServiceError
    from app.migrate import upgrade_head
    from app.schemas import KeyCreate, KeyCreated, KeyOut
    from app.services.keys import create_key_committed

    try:
        request = KeyCreate(name=name, role=role)  # validates the name like POST /v1/keys
    except pydantic.ValidationError as exc:
        field, message = validation_error_line(exc.errors(include_url=False))
        raise InvalidInputError(KEY_OPTIONS.get(field, field or "create-key"), message) from None
    # the database as ``gdpfed serve`` checks it: an unreachable one is one line, exit 2
    _check_database(settings)
    engine = make_engine(settings.database_url, settings.db_busy_timeout_seconds)
    try:
        upgrade_head(engine)
        key, token = create_key_committed(session_factory(engine), request.name, request.role, "cli")
        created = KeyCreated(**KeyOut.model_validate(key, from_attributes=True).model_dump(), token=token)
    except ServiceError as exc:  # a key of that name exists (409 at name over HTTP)
        if exc.field not in KEY_OPTIONS:
            raise
        raise InvalidInputError(KEY_OPTIONS[exc.field], exc.message) from None
    finally:
        engine.dispose()
    text = f"created {role} API key {name!r}; it is shown only now:\n{token}"
    return created, text


def _serve(settings: Any) -> None:
    import logging
    import sys

    import uvicorn

    from app.main import announce_initial_key, bootstrap, create_app

    logging.basicConfig(level=settings.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    _check_database(settings)
    _check_port(settings.host, settings.port)
    settings = _share_cores(settings)
    shown_host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
    if ":" in shown_host:
        shown_host = f"[{shown_host}]"
    where = (f"gdpfed serve: API docs at http://{shown_host}:{settings.port}/docs, operator console at "
             f"http://{shown_host}:{settings.port}/console (database {_redact(settings.database_url)}; "
             f"{settings.workers} server process(es) x {settings.compute_workers} compute worker(s))\n")
    if settings.workers == 1:
        app = create_app(settings)
        sys.stderr.write(where)
        sys.stderr.flush()
        uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level)
        return None
    # Several server processes: migrate and create the first key once, here, then let
    # uvicorn start the processes, each building its app from the same settings.
    state, initial_token = bootstrap(settings)
    state.engine.dispose()
    if initial_token is not None:
        announce_initial_key(initial_token)
    _export(settings)
    sys.stderr.write(where)
    sys.stderr.flush()
    uvicorn.run("app.main:create_app", factory=True, host=settings.host, port=settings.port,
                log_level=settings.log_level, workers=settings.workers)
    return None


def _share_cores(settings: Any) -> Any:
    """Without an explicit compute pool size, the cores are divided among the server processes."""
    from app.compute import default_workers

    if "compute_workers" in settings.model_fields_set or settings.workers == 1:
        return settings
    share = max(1, -(-default_workers() // settings.workers))
    return settings.model_copy(update={"compute_workers": share})


def _export(settings: Any) -> None:
    """Hand the settings to uvicorn's worker processes through their environment (GDPFED_*)."""
    import os

    from pydantic import SecretStr

    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if value is None:
            continue
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        os.environ[f"GDPFED_{name.upper()}"] = str(value)


def _check_database(settings: Any) -> None:
    """A malformed URL, a missing driver or an unreachable server: one line, exit 2."""
    from sqlalchemy.exc import SQLAlchemyError

    from accounting.errors import InvalidInputError
    from app.db import make_engine

    engine = make_engine(settings.database_url, settings.db_busy_timeout_seconds)
    try:
        with engine.connect():
            pass
    except SQLAlchemyError as exc:
        first = str(getattr(exc, "orig", exc) or exc).strip().splitlines()
        raise InvalidInputError(
            "database-url", f"cannot connect to {_redact(settings.database_url)}: {first[0] if first else type(exc).__name__}"
        ) from None
    finally:
        engine.dispose()


def _check_port(host: str, port: int) -> None:
    """Say that the port is taken before printing where the docs would be."""
    import errno
    import socket

    from accounting.errors import InvalidInputError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise InvalidInputError("port", f"{host}:{port} is already in use; choose another with --port") from None
            raise InvalidInputError("host", f"cannot listen on {host}:{port}: {exc.strerror}") from None


def _redact(url: str) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL fails later with its own error
        return "<unparsable url>"
