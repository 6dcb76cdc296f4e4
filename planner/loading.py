"""Reading scenarios, changes and plans from JSON or YAML files (or dicts).

File problems (missing, unreadable, not JSON/YAML, not an object) are
:class:`~accounting.errors.InvalidInputError` naming the kind of document; content problems
are pydantic validation errors naming the field. Both map to exit code 2 / HTTP 422.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from accounting.errors import InvalidInputError
from planner.schema import Changes, Plan, Scenario, load_plan


def read_document(source: str | Path | dict[str, Any], kind: str) -> dict[str, Any]:
    """A dict from a dict, or from a .json / .yaml / .yml file; errors name ``kind``."""
    if isinstance(source, dict):
        return source
    path = Path(source)
    text = read_text(path, kind)
    if path.suffix.lower() in (".yaml", ".yml"):
        data = parse_yaml(text, path, kind)
    else:
        data = parse_json(text, path, kind)
    if not isinstance(data, dict):
        raise InvalidInputError(kind, f"{path} must hold a JSON/YAML object")
    return data


def read_text(path: Path, kind: str) -> str:
    """The UTF-8 text of ``path``; a missing or unreadable file is ``InvalidInputError(kind)``."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInputError(kind, f"file not found: {path}") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError, OSError) as exc:
        raise InvalidInputError(kind, f"cannot read {path}: {exc.__class__.__name__}") from None


def parse_json(text: str, path: str | Path, kind: str) -> Any:
    """``json.loads(text)``; a syntax error is one ``InvalidInputError(kind)`` line naming
    the file, the position and the problem (``scenario.json:3:9: not valid JSON: Expecting value``)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(kind, f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None


def parse_yaml(text: str, path: str | Path, kind: str) -> Any:
    """``yaml.safe_load(text)``; a syntax error is one ``InvalidInputError(kind)`` line naming
    the file, the position (line:column, 1-based) and the problem, with what the parser was
    reading when it met it (PyYAML's own message spans several lines and quotes the text)."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidInputError(kind, yaml_error_line(exc, path, text)) from None


def yaml_error_line(exc: Exception, path: str | Path, text: str) -> str:
    """``bad.yaml:2:2: not valid YAML: expected ',' or ']', but got ':' (while parsing a flow
    sequence started at 1:4)``: PyYAML's marked error on one line, positions 1-based."""
    import yaml

    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = exc.problem or exc.context or "syntax error"
        context = ""
        if exc.problem and exc.context:
            started = exc.context_mark
            context = f" ({exc.context}" + (f" started at {started.line + 1}:{started.column + 1}" if started else "") + ")"
        return f"{where}: not valid YAML: {problem}{context}"
    if isinstance(exc, yaml.reader.ReaderError):
        before = text[: exc.position]
        line, column = before.count("\n") + 1, exc.position - (before.rfind("\n") + 1) + 1
        code = exc.character if isinstance(exc.character, int) else ord(exc.character[:1] or "\0")
        return f"{path}:{line}:{column}: not valid YAML: character U+{code:04X}: {exc.reason}"
    return f"{path}: not valid YAML: " + "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())


def load_scenario_document(source: str | Path | dict[str, Any]) -> BaseModel:
    """A validated scenario of the privacy unit it names (``privacy_unit``, default
    ``client``) from a JSON/YAML file or a dict; an unknown unit is refused by name."""
    from planner.units import load_scenario_document as validate

    return validate(read_document(source, "scenario"))


def load_scenario(source: str | Path | dict[str, Any]) -> Scenario:
    """A validated client-level :class:`Scenario` from a JSON/YAML file or a dict."""
    scenario = load_scenario_document(source)
    if not isinstance(scenario, Scenario):
        raise InvalidInputError(
            "privacy_unit",
            f"this command plans client-level scenarios; this one's privacy_unit is {getattr(scenario, 'privacy_unit', None)!r}",
        )
    return scenario


def load_changes(source: str | Path | dict[str, Any]) -> Changes:
    """Validated :class:`Changes` (re-planning) from a JSON/YAML file or a dict."""
    return Changes.model_validate(read_document(source, "changes"))


def load_plan_file(source: str | Path | dict[str, Any]) -> Plan:
    """A plan document of a known schema version from a file or a dict."""
    return load_plan(read_document(source, "plan"))
