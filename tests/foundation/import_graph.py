"""The file-level import graph of the project's packages: circles, back arrows, deferred imports.

Implements the checks of docs/architecture.md §"Import graph". Run it from the tree root::

    python -m tests.foundation.import_graph            # every package
    python -m tests.foundation.import_graph planner    # one, with each circle's files

It reads the source (AST), imports nothing of the project, and needs no extra.
``tests/foundation/test_import_graph.py`` asserts its findings are empty.

- A node is one file (``planner/units/client.py`` is ``planner.units.client``, a package's
  ``__init__.py`` is the package). An edge is an import run when the file is imported: at
  module level or in a class body, including ``try:`` blocks, excluding function bodies and
  ``if TYPE_CHECKING:`` blocks. ``from a.b import c`` is an edge to the file ``a.b.c`` when
  ``c`` is a module, else to ``a.b``; ``import a.b.c`` is an edge to ``a.b.c``; relative
  imports are resolved the same way. Importing ``a.b.c`` also runs ``a/b/__init__.py``
  unless the importer is inside ``a.b``: that is an edge too (the top-level package's
  ``__init__`` always runs first and is not). Only edges between files of one package count.
- A circle is a strongly connected component of more than one file.
- A back arrow is an import (one inside a function or under ``if TYPE_CHECKING:`` included:
  it is a dependency too)
  from a part of a package to a part on a higher layer of ``LAYERS``, or between two parts
  of ``SIBLINGS`` (the trainer's privacy units, which share a layer and never import each other). A part is a subpackage
  or a loose module directly in the package, named by its first path component, or, where
  ``LAYERS`` names parts inside a subpackage (``units.client``, ``units.registry``), one of
  those: the subpackage's ``__init__`` is then the part named by the subpackage alone.
- A deferred import is a project import (any of ``PROJECT``) inside a function. A latent
  circle is a circle of the graph with the deferred imports inside the package counted as
  edges: a function-level import that closes one is there to hide a circle, not for an
  optional extra or start-up time.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ("accounting", "planner", "app", "trainer", "bench")

# Each package's parts, bottom layer first: a part may import parts on its own layer or below,
# never above (docs/architecture.md §"Import graph"). A new subpackage or loose module gets
# its line here; until it has one it is reported as unplaced.
LAYERS: dict[str, tuple[frozenset[str], ...]] = {
    "accounting": (
        frozenset({"errors", "processes", "search", "rdp", "closed_form", "choices", "normal", "special", "lazy"}),
        frozenset({"validation", "prv"}),
        frozenset({"events"}),
        frozenset({"metric", "results"}),
        frozenset({"accountants"}),
        frozenset({"epsilon", "calibration", "audit"}),
        frozenset({"requests"}),
        frozenset({"cli", "__init__"}),
    ),
    "planner": (
        frozenset({"calibration", "curves", "harary", "mean_estimation", "objective", "partition", "waterfill",
                   "allocate", "pools", "solve", "service_api", "choices"}),
        frozenset({"schema"}),
        frozenset({"adaptive_clip", "fedhdp", "secagg", "ledger", "problem", "learnability", "discrete"}),
        frozenset({"verify", "methods"}),
        frozenset({"finalize"}),
        frozenset({"plan", "report"}),
        frozenset({"replan", "sweep", "units"}),
        frozenset({"loading"}),
        frozenset({"cli", "__init__"}),
    ),
    "app": (
        frozenset({"errors", "metrics", "models", "security"}),
        frozenset({"limits", "compute", "db", "settings", "duplicate_keys", "migrate", "schemas"}),
        frozenset({"deps"}),
        frozenset({"services"}),
        frozenset({"routes", "openapi"}),
        frozenset({"main", "serve_cli", "cli", "__init__"}),
    ),
    # The shared layers, then the privacy units (one folder each, never importing one
    # another: SIBLINGS), the unit registry, the strategy registry that gathers the units'
    # strategies, the one run loop, and the commands on top (docs/trainer.md §Layout).
    "trainer": (
        frozenset({"choices", "device"}),
        frozenset({"data"}),
        frozenset({"models", "engines", "secagg"}),
        frozenset({"strategies"}),
        frozenset({"run"}),
        frozenset({"units", "units.client", "units.silo", "units.metric"}),
        frozenset({"units.registry"}),
        frozenset({"units.strategies"}),
        frozenset({"runner"}),
        frozenset({"cli", "audit_cli", "experiments", "flower", "__init__"}),
    ),
}

# Parts that share a layer and must not import one another either: each privacy unit
# builds on the shared layers only (docs/architecture.md §Dependency direction).
SIBLINGS: dict[str, frozenset[str]] = {
    "trainer": frozenset({"units.client", "units.silo", "units.metric"}),
}


@dataclass
class PackageGraph:
    """One package's files, the edges among them and what the checks found."""

    package: str
    files: list[str] = field(default_factory=list)
    edges: dict[str, set[str]] = field(default_factory=dict)
    type_edges: dict[str, set[str]] = field(default_factory=dict)
    deferred: list[tuple[str, int, str]] = field(default_factory=list)
    deferred_edges: dict[str, set[str]] = field(default_factory=dict)
    circles: list[list[str]] = field(default_factory=list)
    latent_circles: list[list[str]] = field(default_factory=list)
    back_arrows: list[tuple[str, str]] = field(default_factory=list)
    unplaced: list[str] = field(default_factory=list)


def module_name(path: Path, root: Path = ROOT) -> str:
    """The dotted name of a file under ``root`` (a package's ``__init__.py`` is the package)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module) -> list[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import of the file with where it runs: ``module``, ``type`` or ``function``."""
    found: list[tuple[ast.Import | ast.ImportFrom, str]] = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append((child, where))
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, "function")
            elif isinstance(child, ast.If) and where == "module" and _is_type_checking(child.test):
                for statement in child.body:
                    visit(ast.Module(body=[statement], type_ignores=[]), "type")
                for statement in child.orelse:
                    visit(ast.Module(body=[statement], type_ignores=[]), "module")
            else:
                visit(child, where)

    visit(tree, "module")
    return found


def _targets(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool, modules: set[str]) -> list[str]:
    """The project modules one import statement loads, each as specific as the files allow."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = importer.split(".") if is_package else importer.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        parent = ".".join(base + ([node.module] if node.module else []))
    else:
        parent = node.module or ""
    return [f"{parent}.{alias.name}" if f"{parent}.{alias.name}" in modules else parent for alias in node.names]


def _loaded(target: str, importer: str) -> set[str]:
    """The files an import of ``target`` runs: ``target`` and the ``__init__`` of each
    subpackage on its way that the importer is not itself inside (its own packages' were
    run before it). The top-level package's is never counted: it runs before any file of it."""
    parts = target.split(".")
    loaded = {".".join(parts[:depth]) for depth in range(2, len(parts) + 1)}
    return {m for m in loaded if m != importer and not importer.startswith(m + ".")}


def _part(module: str, layer: dict[str, int] | None = None) -> str:
    """The part of the package that ``module`` belongs to: its first path component, or, where
    ``layer`` declares parts inside a subpackage (``units.client``), the longest declared one
    that holds it. A subpackage split so is the part of its own ``__init__`` only; a module
    of it under no declared part is the new part ``subpackage.name`` (reported unplaced)."""
    rest = module.split(".")[1:]
    if not rest:
        return "__init__"
    layer = layer or {}
    for depth in range(1, len(rest) + 1):
        name = ".".join(rest[:depth])
        split = any(part.startswith(name + ".") for part in layer)
        if not split or depth == len(rest):
            return name
    return ".".join(rest)  # unreachable: the last depth returns


def _layer_of(package: str) -> dict[str, int] | None:
    if package not in LAYERS:
        return None
    return {part: index for index, layer in enumerate(LAYERS[package]) for part in layer}


def strongly_connected(nodes: list[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively (a package may have 100 files)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = counter
                    counter += 1
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(edges.get(successor, ())))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def package_graph(package: str, root: Path = ROOT) -> PackageGraph:
    """Build one package's graph and run the three checks on it."""
    # Alembic loads app/migrations/ by path, outside the import system.
    paths = sorted(p for p in (root / package).rglob("*.py") if "migrations" not in p.relative_to(root).parts)
    graph = PackageGraph(package)
    names = {module_name(p, root): p for p in paths}
    modules = set(names)
    graph.files = sorted(modules)
    for name, path in names.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        graph.edges[name] = set()
        graph.type_edges[name] = set()
        graph.deferred_edges[name] = set()
        for node, where in _imports(tree):
            for target in _targets(node, name, path.name == "__init__.py", modules):
                if where == "function" and target.split(".")[0] in (*PROJECT, package):
                    statement = (name, node.lineno, target.split(".")[0])
                    if statement not in graph.deferred:
                        graph.deferred.append(statement)
                while target and target not in modules:
                    target = target.rpartition(".")[0]  # `import a.b.c` where c is a name
                if not target or target.split(".")[0] != package:
                    continue
                kind = {"module": graph.edges, "type": graph.type_edges, "function": graph.deferred_edges}[where]
                kind[name].update(_loaded(target, name))
    graph.circles = [c for c in strongly_connected(graph.files, graph.edges) if len(c) > 1]
    every_run_edge = {m: graph.edges[m] | graph.deferred_edges[m] for m in graph.files}
    graph.latent_circles = [c for c in strongly_connected(graph.files, every_run_edge) if len(c) > 1]
    layer = _layer_of(package)
    if layer is not None:
        parts = {_part(m, layer) for m in graph.files}
        graph.unplaced = sorted(parts - set(layer))
        for source in graph.files:
            for target in sorted(graph.edges[source] | graph.type_edges[source] | graph.deferred_edges[source]):
                a, b = _part(source, layer), _part(target, layer)
                siblings = SIBLINGS.get(package, frozenset())
                if a in layer and b in layer and (layer[b] > layer[a] or (a != b and {a, b} <= siblings)):
                    # One per file and part: `import a.b.c` also loads a/b/__init__.py.
                    graph.back_arrows = [(s, t) for s, t in graph.back_arrows if (s, t) != (source, target.rpartition(".")[0])]
                    graph.back_arrows.append((source, target))
    return graph


def summary(graph: PackageGraph) -> str:
    """One line of counts: files, circles (largest), back arrows, deferred imports."""
    largest = max((len(c) for c in graph.circles), default=0)
    latent = max((len(c) for c in graph.latent_circles), default=0)
    arrows = str(len(graph.back_arrows)) if graph.package in LAYERS else "n/a (no layers)"
    return (
        f"{graph.package}: {len(graph.files)} files, {len(graph.circles)} circles"
        f" (largest {largest} files), {len(graph.latent_circles)} latent circles (largest {latent} files),"
        f" {arrows} back arrows, {len(graph.deferred)} deferred project imports"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.foundation.import_graph", description=__doc__.splitlines()[0])
    parser.add_argument("packages", nargs="*", default=["accounting", "planner", "app", "trainer"])
    parser.add_argument("-v", "--verbose", action="store_true", help="list each circle, back arrow and deferred import")
    args = parser.parse_args(argv)
    for package in args.packages:
        graph = package_graph(package)
        print(summary(graph))
        if args.verbose or len(args.packages) == 1:
            for circle in graph.circles:
                print(f"  circle ({len(circle)}): {' '.join(circle)}")
            for circle in graph.latent_circles:
                print(f"  latent circle ({len(circle)}): {' '.join(circle)}")
            for source, target in graph.back_arrows:
                print(f"  back arrow: {source} -> {target}")
            for part in graph.unplaced:
                print(f"  unplaced part: {part}")
            for source, line, target in graph.deferred:
                print(f"  deferred: {source}:{line} {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
