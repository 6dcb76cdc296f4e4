"""Every external document (a request body, a file the CLI reads) is bounded before it is
parsed: depth, YAML aliases expanded, string and number lengths (planner/loading.py,
docs/architecture.md §Errors). Past a bound it is HTTP 422 naming ``body`` or exit 2 with one
line naming the file, never a RecursionError's 500 or traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import run
from tests.app.conftest import SMALL_SCENARIO, TestClient

ROOT = Path(__file__).resolve().parents[2]
MAX_DOCUMENT_DEPTH = 64  # planner.loading's bounds, as docs/architecture.md §Errors states them
MAX_NUMBER_DIGITS = 400

DEEP_OBJECT = '{"a": ' * 1000 + "1" + "}" * 1000  # 7 KB nested 1,000 levels (the body)
DEEP_LIST = "[" * 1000 + "]" * 1000
# ten aliases of ten aliases ... of ten values: 10^9 values from nine short lines
LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8)
)


def _post(client: TestClient, method: str, url: str, text: str):
    return client.request(method, url, content=text.encode(), headers={"content-type": "application/json"})


@pytest.mark.parametrize("body", [DEEP_OBJECT, DEEP_LIST, '{"scenario": ' + DEEP_LIST + "}"])
def test_a_deeply_nested_body_is_422_naming_the_body(client: TestClient, body: str) -> None:
    for method, url in (("POST", "/v1/plans"), ("POST", "/v1/accounting/epsilon"), ("POST", "/v1/populations")):
        response = _post(client, method, url, body)
        assert response.status_code == 422, response.text
        assert response.json()["field"] == "body", response.json()
        assert f"nested deeper than {MAX_DOCUMENT_DEPTH} levels at 1:" in response.json()["message"], response.json()


def test_a_body_just_inside_the_depth_bound_is_read(client: TestClient) -> None:
    inside = "[" * MAX_DOCUMENT_DEPTH + "]" * MAX_DOCUMENT_DEPTH
    response = _post(client, "POST", "/v1/plans", '{"scenario": ' + inside[1:-1] + "}")
    # parsed, then refused by the schema (a list is no scenario), not by the bound
    assert response.status_code == 422 and response.json()["field"] == "scenario", response.json()


def test_a_number_or_string_past_its_bound_is_422(client: TestClient) -> None:
    huge = _post(client, "POST", "/v1/accounting/epsilon", '{"rounds": ' + "9" * 5000 + "}")
    assert (huge.status_code, huge.json()["field"]) == (422, "body"), huge.text
    assert f"more than {MAX_NUMBER_DIGITS} digits" in huge.json()["message"]
    key = "k" * 200_000
    long = _post(client, "POST", "/v1/plans", '{"' + key + '": 1}')
    assert (long.status_code, long.json()["field"]) == (422, "body"), long.text[:300]
    # a long key that is inside the bounds is named cut to a line, not echoed whole
    twice = _post(client, "POST", "/v1/plans", '{"' + "k" * 5000 + '": 1, "' + "k" * 5000 + '": 2}')
    assert twice.status_code == 422 and len(twice.text) < 500, twice.text[:300]


def _one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert run(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err[:2000]
    return err


@pytest.mark.parametrize("name, text", [("deep.json", DEEP_OBJECT), ("deep.yaml", DEEP_LIST),
                                        ("block.yaml", "".join("  " * i + f"k{i}:\n" for i in range(1000)) + "  " * 1000 + "x: 1\n")])
@pytest.mark.parametrize("command", [["plan"], ["experiment"], ["train", "--dataset", "synthetic", "--model", "logreg", "--plan"]])
def test_a_deeply_nested_file_is_one_line_exit_2(capsys, tmp_path, name, text, command) -> None:
    path = tmp_path / name
    path.write_text(text)
    err = _one_line(capsys, [*command, str(path)])
    assert f"{path}: a value nested deeper than {MAX_DOCUMENT_DEPTH} levels at " in err, err


def test_yaml_aliases_are_counted_expanded_and_may_not_contain_themselves(capsys, tmp_path) -> None:
    laughs = tmp_path / "laughs.yaml"
    laughs.write_text(LAUGHS)
    assert "values (aliases expanded)" in _one_line(capsys, ["experiment", str(laughs)])
    cycle = tmp_path / "cycle.yaml"
    cycle.write_text("groups: &g [{id: a, epsilon: 1, num_clients: 5, more: *g}]\n")
    assert "the alias *g at 1:55 is inside its own anchor" in _one_line(capsys, ["plan", str(cycle)])
    # an alias deep inside the bound that expands past it
    deep = tmp_path / "deep-alias.yaml"
    deep.write_text("a: &a " + "[" * 40 + "1" + "]" * 40 + "\nb: " + "[" * 30 + "*a" + "]" * 30 + "\n")
    assert "nested deeper than" in _one_line(capsys, ["plan", str(deep)])


@pytest.mark.parametrize("name, text", [("big.json", '{"rounds": ' + "9" * 5000 + "}"),
                                        ("big.yaml", "rounds: " + "9" * 5000 + "\n")])
def test_a_number_too_long_for_python_is_one_line(capsys, tmp_path, name, text) -> None:
    path = tmp_path / name
    path.write_text(text)
    err = _one_line(capsys, ["plan", str(path)])
    assert f"{path}: a number with more than {MAX_NUMBER_DIGITS} digits at 1:" in err, err


def test_a_strategy_option_is_bounded_like_a_file(capsys, tmp_path) -> None:
    pytest.importorskip("torch", reason="gdpfed train needs the trainer extra")
    argv = ["train", "--scenario", str(ROOT / "examples" / "scenario.json"), "--method", "gdpfed", "--dataset",
            "synthetic", "--model", "logreg", "--out", str(tmp_path / "run")]
    err = _one_line(capsys, [*argv, "--strategy-option", "rank=" + "[" * 1000 + "]" * 1000])
    assert "strategy-option rank: the value holds a value nested deeper than" in err, err


def test_an_error_quoting_a_long_or_multiline_value_stays_one_short_line(client: TestClient, capsys, tmp_path) -> None:
    """A message that quotes what the user wrote (``unknown method 'xxx...'``) is cut to 2,000
    characters and its line breaks escaped (accounting.errors.message_line), on both edges."""
    for method in ("x" * 99_999, "two\nlines"):
        response = client.post("/v1/plans", json={"scenario": SMALL_SCENARIO, "method": method})
        assert (response.status_code, response.json()["field"]) == (422, "method"), response.text[:300]
        assert len(response.json()["message"]) < 2100 and "\n" not in response.json()["message"], response.text[:300]
        config = tmp_path / "long.yaml"
        config.write_text("name: t\nmethods: [" + json.dumps(method) + "]\nseeds: [0]\n")
        err = _one_line(capsys, ["experiment", str(config)])
        assert len(err) < 2300, err[:300]
