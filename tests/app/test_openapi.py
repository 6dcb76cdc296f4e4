"""The OpenAPI document is one a client generator turns into a complete client (issue 31,
docs/service.md §Clients): unique schema names, every success response typed, every error
declared as ``ErrorBody``, every enum a named schema. Fast: no generator, no server
(``tests/app/test_generated_client.py`` runs the generator against a real ``gdpfed serve``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import pytest

from app.main import create_app
from app.openapi import NAMED_ENUMS, name_enums
from app.settings import Settings
from planner.units import UNITS

ERROR_REF = "#/components/schemas/ErrorBody"
# the one route whose answer is not JSON (Prometheus' text format)
NOT_JSON = {("get", "/metrics")}
# the routes that take no key (by default: /metrics can be made to need one)
OPEN = {("get", "/healthz"), ("get", "/metrics")}


def served_document(where: Path, **settings: Any) -> dict[str, Any]:
    app = create_app(Settings(database_url=f"sqlite:///{where / 'gdpfed.db'}", **settings), announce_key=False)
    return app.openapi()


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return served_document(tmp_path_factory.mktemp("openapi"))


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(method, path, operation) for path, item in document["paths"].items() for method, operation in item.items()]


def refs(schema: dict[str, Any]) -> list[str]:
    """The component references a response schema is made of (itself, a list's items, a union's members)."""
    if "$ref" in schema:
        return [schema["$ref"]]
    if schema.get("type") == "array":
        return refs(schema["items"])
    members = schema.get("oneOf") or schema.get("anyOf") or []
    found = [ref for member in members for ref in refs(member)]
    return found if found and len(found) == len(members) else []


def test_every_schema_name_is_unique_and_its_own_title(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    # pydantic's -Input/-Output pair carries one title: a generator makes one model of the two and drops the other
    titles = [schema.get("title", name) for name, schema in schemas.items()]
    assert len(titles) == len(set(titles)), sorted(title for title in titles if titles.count(title) > 1)
    assert [name for name, schema in schemas.items() if schema.get("title", name) != name] == []


def test_every_success_response_is_a_declared_model(document: dict[str, Any]) -> None:
    untyped = []
    for method, path, operation in operations(document):
        if (method, path) in NOT_JSON:
            continue
        for status, response in operation["responses"].items():
            if status.startswith("2"):
                schema = response.get("content", {}).get("application/json", {}).get("schema", {})
                if not refs(schema):
                    untyped.append(f"{method.upper()} {path} {status}: {schema}")
    assert untyped == []


def test_every_error_response_is_the_error_model(document: dict[str, Any]) -> None:
    wrong = []
    for method, path, operation in operations(document):
        declared = operation["responses"]
        needed = ({"413", "422", "503"} | ({"404"} if "{" in path else set())
                  | (set() if (method, path) in OPEN else {"401", "403"}))
        for status in sorted(needed - set(declared)):
            wrong.append(f"{method.upper()} {path}: {status} not declared")
        for status, response in declared.items():
            if status.startswith(("4", "5")):
                schema = response.get("content", {}).get("application/json", {}).get("schema", {})
                if schema.get("$ref") != ERROR_REF:
                    wrong.append(f"{method.upper()} {path} {status}: {schema}")
    assert wrong == []
    # the refusals a client must be able to read
    assert "409" in document["paths"]["/v1/populations/{population_id}/groups/{group_id}"]["patch"]["responses"]
    assert "409" in document["paths"]["/v1/plans/{plan_id}/rounds"]["post"]["responses"]
    error_fields = document["components"]["schemas"]["ErrorBody"]["properties"]
    assert {"code", "message", "field"} <= set(error_fields)


def test_open_operations_need_no_key_and_the_others_do(document: dict[str, Any], tmp_path: Path) -> None:
    """A generator asks for an authenticated client wherever an operation names a security
    scheme: /healthz and /metrics name none and declare no 401/403 (they inherited both)."""
    schemes: list[dict[str, list[str]]] = [{"HTTPBearer": []}, {"APIKeyHeader": []}]
    for method, path, operation in operations(document):
        if (method, path) in OPEN:
            assert operation.get("security") == [], (method, path)
            assert not {"401", "403"} & set(operation["responses"]), (method, path)
        elif path.startswith("/v1/"):
            assert {"401", "403"} <= set(operation["responses"]), (method, path)
            assert operation.get("security", document.get("security")) == schemes, (method, path)
    # GDPFED_METRICS_REQUIRE_KEY: /metrics needs a key, and says so
    guarded = served_document(tmp_path, metrics_require_key=True)["paths"]["/metrics"]["get"]
    assert guarded["security"] == schemes and "401" in guarded["responses"]
    assert guarded["responses"]["401"]["content"]["application/json"]["schema"]["$ref"] == ERROR_REF


def test_a_plans_method_is_one_named_enum_of_the_planners_methods(document: dict[str, Any]) -> None:
    """PlanCreate.method was a string checked by a validator (a generated client typed it
    ``str``): it is the enum ``PlanCreateMethod``, every unit's methods in the planner's
    registry's order (planner.units)."""
    method = document["components"]["schemas"]["PlanCreate"]["properties"]["method"]
    assert method["anyOf"] == [{"$ref": "#/components/schemas/PlanCreateMethod"}, {"type": "null"}]
    registry = list(dict.fromkeys(method for unit in UNITS.values() for method in unit.methods))
    assert document["components"]["schemas"]["PlanCreateMethod"]["enum"] == registry


def inline_enums(node: Any, where: str = "") -> list[str]:
    if isinstance(node, list):
        return [found for index, item in enumerate(node) for found in inline_enums(item, f"{where}/{index}")]
    if not isinstance(node, dict):
        return []
    here = [f"{where}: {node['enum']}"] if "enum" in node else []
    return here + [found for key, value in node.items() for found in inline_enums(value, f"{where}/{key}")]


def inline_union_consts(node: Any, where: str = "") -> list[str]:
    if isinstance(node, list):
        return [found for index, item in enumerate(node) for found in inline_union_consts(item, f"{where}/{index}")]
    if not isinstance(node, dict):
        return []
    here = [f"{where}: {member['const']}" for key in ("anyOf", "oneOf") for member in node.get(key, [])
            if "const" in member]
    return here + [found for key, value in node.items() for found in inline_union_consts(value, f"{where}/{key}")]


def test_every_enum_is_a_named_schema(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    named = {f"/components/schemas/{name}" for name in NAMED_ENUMS}
    inline = [found for found in inline_enums(document) if found.split(":")[0] not in named]
    assert inline == [], "name the Literal in app.openapi.NAMED_ENUMS"
    for name, literal in NAMED_ENUMS.items():
        assert schemas[name]["enum"] == list(get_args(literal)), name
    # a const member of a union (keep_ratio: a number or "auto") defeats the generator's union parsing
    assert inline_union_consts(document) == []
    ledger = schemas["LedgerOut"]["properties"]["accountant"]
    assert ledger["$ref"] == "#/components/schemas/AccountantName" and "description" in ledger


def test_name_enums_keeps_a_fields_default_and_refuses_two_names_for_one_enum(monkeypatch: pytest.MonkeyPatch) -> None:
    document = {"paths": {}, "components": {"schemas": {"M": {"properties": {"status": {
        "type": "string", "enum": ["started", "completed"], "default": "completed", "title": "Status"}}}}}}
    field = name_enums(document)["components"]["schemas"]["M"]["properties"]["status"]
    assert field == {"$ref": "#/components/schemas/RoundStatus", "default": "completed", "title": "Status"}
    monkeypatch.setitem(NAMED_ENUMS, "Copy", NAMED_ENUMS["RoundStatus"])
    with pytest.raises(ValueError, match="one enum, two names"):
        name_enums({"paths": {}})

