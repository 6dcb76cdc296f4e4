"""Reading scenarios, changes and plans from JSON or YAML files (or dicts).

File problems (missing, unreadable, not JSON/YAML, not an object) are
:class:`~accounting.errors.InvalidInputError` naming the kind of document and the file;
content problems of a file name the kind, the file and the field (:func:`naming_file`), those
of a dict (the service's bodies) are pydantic validation errors naming the field. All map to
exit code 2 / HTTP 422.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from accounting.errors import InvalidInputError, shown, validation_error_line
from planner.schema import Changes, Plan, PlanDocument, Scenario
from planner.units import load_plan, load_plan_document
from planner.units import load_scenario_document as validate_scenario_document


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


# Bounds on every external document (a file the CLI reads, a request body), checked before
# the document is parsed (docs/architecture.md §Errors): the parsers and the checks after them
# recurse once per level, so an unbounded depth is a RecursionError (a traceback, HTTP 500), and
# a YAML alias repeats a node without its bytes ("billion laughs"). No real document comes near:
# a plan nests 5 levels, an experiment configuration 7; the largest plan the schema allows
# (200,000 groups) is about 150 MB.
MAX_DOCUMENT_DEPTH = 64
MAX_DOCUMENT_NODES = 5_000_000  # values after YAML aliases are expanded
MAX_DOCUMENT_BYTES = 256 * 1024 * 1024  # a file; the service bounds bodies by GDPFED_MAX_REQUEST_BYTES
MAX_STRING_CHARS = 100_000  # one string (a key or a value)
MAX_NUMBER_DIGITS = 400  # one number literal (a double tops out at 309 digits; Python refuses ints of 4,300)


class DocumentShapeError(ValueError):
    """A document past one of the bounds above; the message says which, and where."""


def read_text(path: Path, kind: str) -> str:
    """The UTF-8 text of ``path``; a missing or unreadable file, or one larger than
    ``MAX_DOCUMENT_BYTES``, is ``InvalidInputError(kind)``."""
    try:
        size = path.stat().st_size
        if size > MAX_DOCUMENT_BYTES:
            raise InvalidInputError(kind, f"{path}: the file holds {size} bytes, more than {MAX_DOCUMENT_BYTES}")
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInputError(kind, f"file not found: {path}") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError, OSError) as exc:
        raise InvalidInputError(kind, f"cannot read {path}: {exc.__class__.__name__}") from None


class DuplicateKeyError(ValueError):
    """A JSON object or YAML mapping names one key twice. Refused rather than resolved to the
    last value, which would silently change a privacy setting (``epsilon: 1`` then ``epsilon: 8``)."""

    def __init__(self, key: str, where: str = "") -> None:
        super().__init__(f"duplicate key {key!r}")
        self.key = key
        self.where = where


def unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for :func:`json.loads` that refuses a key given twice in one object."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(key)
        out[key] = value
    return out


# A JSON string (escapes included), a bracket, or a run of digits too long for one number: the
# tokens that decide a document's depth and sizes. Strings are matched whole, so brackets and
# digits inside them do not count.
_LONG_NUMBER = "[0-9]{" + str(MAX_NUMBER_DIGITS + 1) + ",}"
_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]|' + _LONG_NUMBER, re.DOTALL)


def _position(text: str, offset: int) -> str:
    """``line:column`` (1-based) of ``offset`` in ``text``."""
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return f"{line}:{column}"


def json_shape_problem(text: str | bytes) -> str | None:
    """Why the JSON ``text`` is past the document bounds (``a value nested deeper than 64
    levels at 1:65``), or None. One pass over its tokens, iterative, before any parser recurses; text
    that is not JSON is left to the parser to name."""
    if isinstance(text, bytes):
        try:
            text = text.decode(json.detect_encoding(text), "surrogatepass")
        except (UnicodeDecodeError, LookupError):
            return None
    depth = 0
    for match in _JSON_TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > MAX_DOCUMENT_DEPTH:
                return f"a value nested deeper than {MAX_DOCUMENT_DEPTH} levels at {_position(text, match.start())}"
        elif token in "]}":
            depth -= 1
        elif token[0] == '"':
            if len(token) - 2 > MAX_STRING_CHARS:
                return f"a string longer than {MAX_STRING_CHARS} characters at {_position(text, match.start())}"
        else:
            return f"a number with more than {MAX_NUMBER_DIGITS} digits at {_position(text, match.start())}"
    return None


def loads_unique(text: str | bytes) -> Any:
    """``json.loads`` refusing duplicate keys (:class:`DuplicateKeyError`) and a document past
    the bounds (:class:`DocumentShapeError`, checked first)."""
    problem = json_shape_problem(text)
    if problem is not None:
        raise DocumentShapeError(problem)
    return json.loads(text, object_pairs_hook=unique_object)


class _Pairs(list[tuple[str, Any]]):
    """A JSON object as its (key, value) pairs, duplicates kept (see :func:`duplicate_key_path`)."""


def duplicate_key_path(text: str | bytes) -> list[str | int] | None:
    """The path (``["scenario", "groups", 1, "epsilon"]``) of the first key given twice in one
    object of the JSON ``text``, or None when every key is unique, the text is not JSON or it
    is past the document bounds (:func:`json_shape_problem` names those)."""
    if json_shape_problem(text) is not None:
        return None
    try:
        document = json.loads(text, object_pairs_hook=_Pairs)
    except ValueError:
        return None

    def walk(value: Any, path: list[str | int]) -> list[str | int] | None:
        if isinstance(value, _Pairs):
            seen: set[str] = set()
            for key, _ in value:
                if key in seen:
                    return [*path, key]
                seen.add(key)
            items: list[tuple[str | int, Any]] = list(value)
        elif isinstance(value, list):
            items = list(enumerate(value))
        else:
            return None
        for step, item in items:
            found = walk(item, [*path, step])
            if found is not None:
                return found
        return None

    return walk(document, [])


def parse_json(text: str, path: str | Path, kind: str) -> Any:
    """``json.loads(text)``; a syntax error is one ``InvalidInputError(kind)`` line naming
    the file, the position and the problem (``scenario.json:3:9: not valid JSON: Expecting value``).
    A key given twice in one object is refused the same way, naming the key
    (``scenario.json: duplicate key 'epsilon' (at groups.0.epsilon)``): the last value never silently wins."""
    try:
        return loads_unique(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(kind, f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
    except DuplicateKeyError as exc:
        where = ".".join(shown(part) for part in duplicate_key_path(text) or [exc.key])
        raise InvalidInputError(kind, f"{path}: duplicate key {shown(exc.key)!r} (at {where}): give each key once") from None
    except DocumentShapeError as exc:
        raise InvalidInputError(kind, f"{path}: {exc}") from None


def parse_yaml(text: str, path: str | Path, kind: str) -> Any:
    """``yaml.safe_load(text)``; a syntax error is one ``InvalidInputError(kind)`` line naming
    the file, the position (line:column, 1-based) and the problem, with what the parser was
    reading when it met it (PyYAML's own message spans several lines and quotes the text)."""
    import yaml

    try:
        problem = yaml_shape_problem(text)
        if problem is not None:
            raise InvalidInputError(kind, f"{path}: {problem}")
        return yaml.load(text, Loader=unique_key_loader())  # a SafeLoader subclass: safe
    except DuplicateKeyError as exc:
        raise InvalidInputError(kind, f"{path}:{exc.where}: duplicate key {shown(exc.key)!r}: give each key once") from None
    except yaml.YAMLError as exc:
        raise InvalidInputError(kind, yaml_error_line(exc, path, text)) from None


def yaml_shape_problem(text: str) -> str | None:
    """Why the YAML ``text`` is past the document bounds, or None: its depth and node count
    with every alias expanded (an alias repeats its anchor's node, so ten aliases of ten
    aliases of ... make a billion values from a few lines), an alias inside its own anchor
    (a cycle), a string or a number too long. One pass over the parser's events, iterative,
    before PyYAML's composer and constructor recurse; a syntax error is left to the loader."""
    import yaml

    # per anchor: (values, container levels) of its node, aliases expanded
    anchors: dict[str, tuple[int, int]] = {}
    # per open container: [anchor, values before it, deepest child's levels]
    open_nodes: list[list[Any]] = []
    values = 0

    def add(levels: int, where: Any) -> str | None:
        if len(open_nodes) + levels > MAX_DOCUMENT_DEPTH:
            return f"a value nested deeper than {MAX_DOCUMENT_DEPTH} levels at {where.line + 1}:{where.column + 1}"
        if values > MAX_DOCUMENT_NODES:
            return f"more than {MAX_DOCUMENT_NODES} values (aliases expanded) at {where.line + 1}:{where.column + 1}"
        if open_nodes:
            open_nodes[-1][2] = max(open_nodes[-1][2], levels)
        return None

    try:
        for event in yaml.parse(text, Loader=unique_key_loader()):
            mark = event.start_mark
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                if len(open_nodes) + 1 > MAX_DOCUMENT_DEPTH:
                    return add(1, mark)
                values += 1
                open_nodes.append([event.anchor, values - 1, 0])
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                anchor, before, deepest = open_nodes.pop()
                if anchor is not None:
                    anchors[anchor] = (values - before, deepest + 1)
                problem = add(deepest + 1, mark)
                if problem:
                    return problem
            elif isinstance(event, yaml.ScalarEvent):
                if len(event.value) > MAX_STRING_CHARS:
                    return f"a string longer than {MAX_STRING_CHARS} characters at {mark.line + 1}:{mark.column + 1}"
                if event.style is None and re.search(_LONG_NUMBER, event.value.replace("_", "")):
                    return f"a number with more than {MAX_NUMBER_DIGITS} digits at {mark.line + 1}:{mark.column + 1}"
                values += 1
                if event.anchor is not None:
                    anchors[event.anchor] = (1, 0)
                problem = add(0, mark)
                if problem:
                    return problem
            elif isinstance(event, yaml.AliasEvent):
                if any(node[0] == event.anchor for node in open_nodes):
                    return f"the alias *{shown(event.anchor)} at {mark.line + 1}:{mark.column + 1} is inside its own anchor"
                count, levels = anchors.get(event.anchor, (1, 0))  # an unknown anchor: the loader names it
                values += count
                problem = add(levels, mark)
                if problem:
                    return problem
    except yaml.YAMLError:
        return None  # the loader reports it with its position
    return None


@functools.cache
def unique_key_loader() -> Any:
    """A ``yaml.SafeLoader`` subclass whose mappings refuse a key given twice
    (:class:`DuplicateKeyError` with the second key's line:column, 1-based). A key brought
    in by a merge (``<<: *base``) may still be overridden, as YAML defines."""
    import yaml

    class UniqueKeySafeLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, yaml.MappingNode):
                seen: set[Any] = set()
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=deep)
                    try:
                        repeated = key in seen
                    except TypeError:  # an unhashable key: SafeLoader itself refuses it
                        break
                    if repeated:
                        mark = key_node.start_mark
                        raise DuplicateKeyError(str(key), f"{mark.line + 1}:{mark.column + 1}")
                    seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return UniqueKeySafeLoader


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


@contextmanager
def naming_file(kind: str, path: str | Path | dict[str, Any] | None) -> Iterator[None]:
    """Errors in the content of a document read from the file ``path`` name the file, then
    the field's path in the document, as a file that does not parse does:
    ``InvalidInputError(kind)`` reading ``scenario: bad.yaml: groups.0.epsilon: Input should
    be greater than 0`` for pydantic's ``ValidationError`` (its first error), ``plan:
    plan.json: schema_version: missing: ...`` for an ``InvalidInputError``. A document given
    as a dict (``path`` a dict or None) has no file: its errors pass unchanged."""
    if path is None or isinstance(path, dict):
        yield
        return
    try:
        yield
    except ValidationError as exc:
        field, message = validation_error_line(exc.errors(include_url=False))
        raise InvalidInputError(kind, f"{path}: {field or 'input'}: {message}") from None
    except InvalidInputError as exc:
        raise InvalidInputError(kind, f"{path}: {exc.message}") from None


def load_scenario_document(source: str | Path | dict[str, Any]) -> BaseModel:
    """A validated scenario of the privacy unit it names (``privacy_unit``, default
    ``client``) from a JSON/YAML file or a dict; an unknown unit is refused by name.
    Errors in a file's content name the file (:func:`naming_file`)."""
    document = read_document(source, "scenario")
    with naming_file("scenario", source):
        return validate_scenario_document(document)


def load_scenario(source: str | Path | dict[str, Any]) -> Scenario:
    """A validated client-level :class:`Scenario` from a JSON/YAML file or a dict."""
    scenario = load_scenario_document(source)
    if not isinstance(scenario, Scenario):
        with naming_file("scenario", source):
            raise InvalidInputError(
                "privacy_unit",
                f"this command plans client-level scenarios; this one's privacy_unit is {getattr(scenario, 'privacy_unit', None)!r}",
            )
    return scenario


def load_changes(source: str | Path | dict[str, Any], model: type[BaseModel] = Changes) -> Any:
    """Validated changes of a re-plan from a JSON/YAML file or a dict: a client-level plan's
    :class:`Changes`, or ``model``, another privacy unit's (``PrivacyUnit.changes_model``:
    silos' epsilons, metric groups' leakage budgets); a field is named ``changes.<path>``,
    as a budget conflict of the same re-plan names it. The one reader of a re-plan's
    changes: ``gdpfed plan replan`` reads its file with it, the service its request's
    ``changes`` (``POST /v1/plans/{id}/replan``)."""
    try:
        return model.model_validate(read_document(source, "changes"))
    except ValidationError as exc:
        field, message = validation_error_line(exc.errors(include_url=False))
        raise InvalidInputError(f"changes.{field}" if field else "changes", message) from None


def load_plan_document_file(source: str | Path | dict[str, Any]) -> PlanDocument:
    """A plan document of any privacy unit (``planner.units.load_plan_document``) from a file
    or a dict; errors in a file's content name the file (:func:`naming_file`)."""
    document = read_document(source, "plan")
    with naming_file("plan", source):
        return load_plan_document(document)


def load_plan_file(source: str | Path | dict[str, Any]) -> Plan:
    """A client-level plan document of a known schema version from a file or a dict;
    errors in a file's content name the file (:func:`naming_file`)."""
    document = read_document(source, "plan")
    with naming_file("plan", source):
        return load_plan(document)
