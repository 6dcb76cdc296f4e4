"""The service's OpenAPI document, shaped for generated clients (docs/service.md §Clients).

FastAPI builds the document from the routes and their pydantic models. pydantic writes a
``Literal`` inline at every field that uses it, so a generator makes one enum class per
field (``LedgerOutAccountant``, ``PlanSummaryAccountant``, ...) for what is one type in
the code. ``name_enums`` replaces every inline enum that is one of the project's named
``Literal`` types (``NAMED_ENUMS``) with a reference to one component schema of that
name, so the client has one ``AccountantName``. A one-value ``Literal`` that is one member of a
union (``keep_ratio``: a number or ``"auto"``) is written by pydantic as ``const``, which
openapi-python-client 0.29.1 parses wrongly in a union (it refuses every number); named,
it is an enum the generated client tells apart. ``tests/app/test_openapi.py`` checks that
no inline enum is left, so a new ``Literal`` in an API model must be named here.

The app declares 401 and 403 on every operation; ``declare_open`` takes them off the
operations that take no key (``/healthz``; ``/metrics`` unless it is configured to need one)
and gives those ``security: []``, so a generated client calls them without a key.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, get_args

from fastapi import FastAPI

from accounting.accountants import AccountantName
from accounting.results import SolvedFor
from app.schemas import PlanCreateMethod
from app.security import Role
from planner.schema import GroupStatus, KeepRatioAuto, PlanMethod, SecaggMechanism, SecaggMode
from planner.service_api import RoundStatus
from planner.units import UNITS

# component name -> the Literal it is; the names are the code's own
NAMED_ENUMS: dict[str, Any] = {
    "AccountantName": AccountantName,
    "PlanMethod": PlanMethod,
    "PlanCreateMethod": PlanCreateMethod,
    "Role": Role,
    "RoundStatus": RoundStatus,
    "GroupStatus": GroupStatus,
    "SecaggMode": SecaggMode,
    "SecaggMechanism": SecaggMechanism,
    "SolvedFor": SolvedFor,
    "KeepRatioAuto": KeepRatioAuto,
    # each privacy unit's own (SiloMethod, RadiusRule, ...)
    **{name: literal for unit in UNITS.values() for name, literal in unit.wire_enums.items()},
}
# what a field keeps beside its reference (the type's values move to the component)
_FIELD_KEYS = ("description", "default", "title")


def _enum_names() -> dict[tuple[Any, ...], str]:
    names: dict[tuple[Any, ...], str] = {}
    for name, literal in NAMED_ENUMS.items():
        values = tuple(get_args(literal))
        if values in names:
            raise ValueError(f"{name} and {names[values]} have the same values {values}: one enum, two names")
        names[values] = name
    return names


def name_enums(document: dict[str, Any]) -> dict[str, Any]:
    """Replace inline enums of ``NAMED_ENUMS``' values by references to named components (in place)."""
    names = _enum_names()
    schemas = document.setdefault("components", {}).setdefault("schemas", {})

    def named(node: Any) -> Any:
        if isinstance(node, list):
            return [named(item) for item in node]
        if not isinstance(node, dict):
            return node
        if isinstance(node.get("enum"), list):
            name = names.get(tuple(node["enum"]))
        else:
            name = names.get((node["const"],)) if isinstance(node.get("const"), str) else None
        if name is None:
            return {key: named(value) for key, value in node.items()}
        values = list(get_args(NAMED_ENUMS[name]))
        schemas[name] = {"type": node.get("type", "string"), "enum": values, "title": name}
        return {"$ref": f"#/components/schemas/{name}", **{key: node[key] for key in _FIELD_KEYS if key in node}}

    document["paths"] = named(document.get("paths", {}))
    for key, schema in list(schemas.items()):
        if key not in NAMED_ENUMS:
            schemas[key] = named(schema)
    return document


def declare_open(document: dict[str, Any], operations: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """Declare each ``(method, path)`` open (in place): no security requirement (``security:
    []``, which overrides any other) and no 401/403, which the app declares on every operation.
    A generator then lets an unauthenticated client call it (openapi-python-client asks for an
    ``AuthenticatedClient`` wherever an operation names a security scheme)."""
    for method, path in operations:
        operation = document["paths"][path][method]
        operation["security"] = []
        for status in ("401", "403"):
            operation["responses"].pop(status, None)
    return document


def install_openapi(app: FastAPI, open_operations: Iterable[tuple[str, str]] = ()) -> None:
    """Serve ``name_enums`` of FastAPI's document, with ``open_operations`` declared open
    (``declare_open``), at ``/openapi.json`` (built once, then cached)."""
    build = app.openapi
    open_operations = tuple(open_operations)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = declare_open(name_enums(build()), open_operations)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
