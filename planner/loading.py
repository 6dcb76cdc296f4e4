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
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInputError(kind, f"file not found: {path}") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError, OSError) as exc:
        raise InvalidInputError(kind, f"cannot read {path}: {exc.__class__.__name__}") from None
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise InvalidInputError(kind, f"{path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidInputError(kind, f"{path} is not valid JSON: {exc.msg} (line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise InvalidInputError(kind, f"{path} must hold a JSON/YAML object")
    return data


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
