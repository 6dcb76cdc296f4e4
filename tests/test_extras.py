"""A subcommand without its extra names the extra (issue 9 §5), and the table that says so
agrees with pyproject.toml."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from app import cli as app_cli

REPO = Path(__file__).resolve().parents[1]
# distribution name in pyproject.toml -> the module gdpfed imports
DISTRIBUTION_MODULES = {
    "torch": "torch",
    "cryptography": "cryptography",
    "pycryptodome": "Crypto",
    "scikit-learn": "sklearn",
    "tqdm": "tqdm",
    "psycopg": "psycopg",
    "cvxpy": "cvxpy",
    "opacus": "opacus",
    "dp-accounting": "dp_accounting",
    "flwr": "flwr",
}


def test_module_extras_match_pyproject() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for module, extra in app_cli.MODULE_EXTRAS.items():
        distributions = {re.split(r"[\[<>=!~;]", requirement)[0].strip() for requirement in extras[extra]}
        assert any(DISTRIBUTION_MODULES.get(d) == module for d in distributions), (module, extra)


@pytest.mark.parametrize("command", [["train", "--plan", "x.json"], ["experiment", "experiments/main.yaml"],
                                     ["bench", "trainer", "--quick"], ["bench", "planner", "--quick"],
                                     ["flower", "app", "--plan", "x.json", "--out", "a", "--run-dir", "r"]])
def test_missing_extra_is_named_in_one_line(command: list[str], monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    import builtins

    real_import = builtins.__import__

    def no_torch(name, *args, **kwargs):
        if name.split(".")[0] in ("torch", "cvxpy", "opacus", "flwr"):
            raise ModuleNotFoundError(f"No module named {name.split('.')[0]!r}", name=name.split(".")[0])
        return real_import(name, *args, **kwargs)

    for module in [m for m in list(__import__("sys").modules) if m.split(".")[0] in ("torch", "trainer", "bench")]:
        monkeypatch.delitem(__import__("sys").modules, module)
    monkeypatch.setattr(builtins, "__import__", no_torch)
    import importlib.util

    real_find_spec = importlib.util.find_spec
    # a missing extra is also invisible to find_spec (gdpfed train looks before importing)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None if name.split(".")[0] in (
        "torch", "cvxpy", "opacus", "flwr") else real_find_spec(name, *args))
    code = app_cli.run(command)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert "extra" in lines[0] and "pip install 'gdpfed[" in lines[0], lines[0]
    # from a clone, 'gdpfed[extra]' asks the package index, not the checkout: say both
    assert re.search(r"""pip install 'gdpfed\[(\w+)\]' \(from a checkout: pip install -e "\.\[\1\]"\)$""", lines[0]), lines[0]
