"""The layering of docs/architecture.md, checked on the source: who may import whom.

accounting <- planner <- app; trainer imports planner and accounting, never app;
torch only under trainer/; flwr only under trainer/flower/. A static check (AST) sees imports inside functions too.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("accounting", "planner", "app", "trainer")
ALLOWED = {
    "accounting": set(),
    "planner": {"accounting"},
    "app": {"accounting", "planner"},
    "trainer": {"accounting", "planner"},
}
# app/cli.py is the one dispatcher that knows every subcommand (it reaches the trainer only
# through trainer.cli, by module name, and bench through bench.cli).
DISPATCHER = ROOT / "app" / "cli.py"


def imported_top_levels(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def package_files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", PACKAGES)
def test_package_imports_only_what_it_may(package):
    offenders = []
    for path in package_files(package):
        if path == DISPATCHER:
            continue
        project_imports = imported_top_levels(path) & set(PACKAGES) - {package}
        extra = project_imports - ALLOWED[package]
        if extra:
            offenders.append(f"{path.relative_to(ROOT)} imports {sorted(extra)}")
    assert not offenders, offenders


@pytest.mark.parametrize("package", ["accounting", "planner", "app"])
def test_torch_is_imported_only_under_trainer(package):
    offenders = [
        str(path.relative_to(ROOT))
        for path in package_files(package)
        if "torch" in imported_top_levels(path)
    ]
    assert not offenders


def _flower_module(relative: Path) -> bool:
    """``trainer/flower/...``, or the Flower bench (``bench/flower*.py``: it runs Flower's own FedAvg as the peer)."""
    return relative.parts[:2] == ("trainer", "flower") or (relative.parts[0] == "bench" and relative.name.startswith("flower"))


def test_flwr_is_imported_only_under_trainer_flower():
    """The ``flower`` extra is optional: only ``trainer/flower/`` (and the Flower bench) import flwr."""
    offenders = [
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in package_files(package)
        if "flwr" in imported_top_levels(path) and not _flower_module(path.relative_to(ROOT))
    ]
    assert not offenders


def test_service_and_planner_import_without_torch():
    """Import every non-trainer module in a fresh interpreter where torch cannot load."""
    modules = [
        ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for package in ("accounting", "planner", "app")
        for path in package_files(package)
        if "migrations" not in path.parts
    ]
    code = (
        "import sys, importlib\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch' or name.startswith('torch.'):\n"
        "            raise ImportError('torch blocked by test')\n"
        "sys.meta_path.insert(0, Block())\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
