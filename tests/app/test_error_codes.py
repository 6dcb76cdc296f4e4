"""docs/service.md §Errors lists every error code the service answers, with its status, and
no other (issue 31): the codes are read from the service's code, the table from the
markdown, so the two cannot drift. A code is answered where ``app/`` builds a
``ServiceError`` or an ``error_response`` with a literal status and code, by the HTTP
layer's statuses (``app.errors._STATUS_CODES``), and by the project's own error types
(``accounting.errors``: ``BudgetConflictError`` as 409, the others as 422,
``app.errors.install_error_handlers``). A call whose status or code is not a literal must be
one of ``COMPUTED``, each covered by one of those sources.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import app.main  # noqa: F401  (imports every module the service raises from)
from accounting.errors import BudgetConflictError, GdpfedError
from app.errors import _STATUS_CODES, ServiceError

ROOT = Path(__file__).resolve().parents[2]
# the packages the service is built from (tests/foundation/test_dependency_direction.py: app imports no trainer)
SERVICE_PACKAGES = ("accounting", "planner", "app")
BUILDERS = ("ServiceError", "error_response")
# (file, status, code) of each call that computes its code, and why the sources above cover it
COMPUTED = {
    ("app/errors.py", "exc.status", "exc.code"): "the ServiceError handler: the literal ServiceErrors",
    ("app/errors.py", "409", "exc.code"): "the BudgetConflictError handler: the error types",
    ("app/errors.py", "422", "exc.code or 'invalid_input'"): "the GdpfedError handler: the error types",
    ("app/errors.py", "exc.status_code", "code"): "the HTTP layer's errors: _STATUS_CODES",
    ("app/services/populations.py", "409", "exc.code"): "a BudgetConflictError's code: the error types",
}


def built_codes() -> tuple[set[tuple[int, str]], set[tuple[str, str, str]]]:
    """The (status, code) of every literal ``ServiceError(...)``/``error_response(...)`` in app/,
    and the (file, status, code) source of every other."""
    literal: set[tuple[int, str]] = set()
    computed: set[tuple[str, str, str]] = set()
    for path in sorted((ROOT / "app").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or len(node.args) < 2:
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if name not in BUILDERS:
                continue
            status, code = node.args[:2]
            if isinstance(status, ast.Constant) and isinstance(code, ast.Constant):
                literal.add((status.value, code.value))
            else:
                computed.add((str(path.relative_to(ROOT)), ast.unparse(status), ast.unparse(code)))
    return literal, computed


def error_types(base: type[GdpfedError] = GdpfedError) -> set[tuple[int, str]]:
    """The (status, code) of every project error type the service maps (not ServiceError, which
    carries its own; not GdpfedError itself, which only the command line raises)."""
    found: set[tuple[int, str]] = set()
    for kind in base.__subclasses__():
        if issubclass(kind, ServiceError):
            continue
        if kind.__module__.split(".")[0] not in SERVICE_PACKAGES:
            # the trainer's own errors (reports undelivered, divergence, ...) exist in this
            # process once a test before this one imported the trainer: the service never raises them
            continue
        found.add((409 if issubclass(kind, BudgetConflictError) else 422, kind.code))
        found |= error_types(kind)
    return found


def documented_codes() -> set[tuple[int, str]]:
    """The (status, code) rows of docs/service.md §Errors' table."""
    text = (ROOT / "docs" / "service.md").read_text()
    section = text.split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d{3}) \| `([a-z_]+)` \|", section, flags=re.MULTILINE)
    assert rows, "no table in docs/service.md §Errors"
    return {(int(status), code) for status, code in rows}


def test_every_code_the_service_answers_is_in_the_table_and_no_other() -> None:
    literal, computed = built_codes()
    assert computed == set(COMPUTED), "a computed error code: say in COMPUTED which source covers it"
    answered = literal | set(_STATUS_CODES.items()) | error_types()
    # the ones the first table missed
    assert {(409, "budget_conflict"), (409, "superseded"), (503, "replanning")} <= answered
    documented = documented_codes()
    assert sorted(answered - documented) == [], "answered but not in docs/service.md §Errors"
    assert sorted(documented - answered) == [], "in docs/service.md §Errors but never answered"
