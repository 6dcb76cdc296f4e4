"""No import circle, no back arrow, no circle hidden by an import inside a function
(docs/architecture.md §"Import graph"; the graph is tests/foundation/import_graph.py)."""

from __future__ import annotations

import functools

import pytest

from tests.foundation.import_graph import LAYERS, SIBLINGS, package_graph

PACKAGES = ("accounting", "planner", "app", "trainer")  # every package: circles and back arrows
CIRCLE_FREE = PACKAGES
graph_of = functools.cache(package_graph)


@pytest.mark.parametrize("package", CIRCLE_FREE)
def test_no_circle_between_files(package):
    assert graph_of(package).circles == []


@pytest.mark.parametrize("package", CIRCLE_FREE)
def test_no_circle_closed_by_an_import_inside_a_function(package):
    """A function-level import is for an optional extra or start-up time, never to hide a circle."""
    assert graph_of(package).latent_circles == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_back_arrow(package):
    assert package in LAYERS, f"declare {package}'s layers in import_graph.LAYERS"
    graph = graph_of(package)
    assert graph.unplaced == [], f"give {graph.unplaced} a layer in import_graph.LAYERS"
    assert graph.back_arrows == []


def _package(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_graph_reads_from_imports_of_modules_and_subpackage_inits(tmp_path):
    """``from pkg import b`` is an edge to the file b.py; importing ``pkg.sub.c`` runs
    pkg/sub/__init__.py, which closes this circle; a function's import closes only a latent one."""
    _package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg import b\n",
        "pkg/b.py": "from .sub.c import x\n",
        "pkg/sub/__init__.py": "import pkg.a\n",
        "pkg/sub/c.py": "x = 1\n",
        "pkg/d.py": "def f():\n    from pkg import a\n",
        "pkg/e.py": "from pkg.d import f\n",
        "pkg/f.py": "def g():\n    from pkg import e\n",
    })
    graph = package_graph("pkg", root=tmp_path)
    assert graph.edges["pkg.a"] == {"pkg.b"}
    assert graph.edges["pkg.b"] == {"pkg.sub", "pkg.sub.c"}
    assert graph.circles == [["pkg.a", "pkg.b", "pkg.sub"]]
    assert graph.latent_circles == [["pkg.a", "pkg.b", "pkg.sub"]]
    assert [(source, target) for source, _, target in graph.deferred] == [("pkg.d", "pkg"), ("pkg.f", "pkg")]


def test_a_function_import_that_closes_a_circle_is_a_latent_circle(tmp_path):
    _package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "def f():\n    from pkg import b\n",
        "pkg/b.py": "from pkg import a\n",
    })
    graph = package_graph("pkg", root=tmp_path)
    assert graph.circles == []
    assert graph.latent_circles == [["pkg.a", "pkg.b"]]


def test_an_import_up_the_layers_is_a_back_arrow_even_inside_a_function(tmp_path, monkeypatch):
    _package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low.py": "def f():\n    from pkg.high import g\n",
        "pkg/high/__init__.py": "",
        "pkg/high/g.py": "from pkg import low\n",
        "pkg/new.py": "",
    })
    monkeypatch.setitem(LAYERS, "pkg", (frozenset({"low"}), frozenset({"high", "__init__"})))
    graph = package_graph("pkg", root=tmp_path)
    assert graph.back_arrows == [("pkg.low", "pkg.high.g")]  # the module, not also its package
    assert graph.unplaced == ["new"]


def test_layers_inside_a_subpackage_place_each_of_its_modules(tmp_path, monkeypatch):
    """Dotted parts (``units.a``) split a subpackage: its ``__init__`` is the part ``units``, a
    module under no declared part is reported unplaced, and siblings may not import each other."""
    _package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/run.py": "def f():\n    from pkg.units import registry\n",
        "pkg/units/__init__.py": "",
        "pkg/units/registry.py": "from pkg.units.a import x\nfrom pkg.units.b import y\nfrom pkg import run\n",
        "pkg/units/a/__init__.py": "",
        "pkg/units/a/x.py": "from pkg.units.b import y\n",
        "pkg/units/b/__init__.py": "",
        "pkg/units/b/y.py": "from pkg import run\n",
        "pkg/units/c/__init__.py": "",
    })
    monkeypatch.setitem(LAYERS, "pkg", (frozenset({"run"}), frozenset({"units", "units.a", "units.b"}),
                                        frozenset({"units.registry", "__init__"})))
    monkeypatch.setitem(SIBLINGS, "pkg", frozenset({"units.a", "units.b"}))
    graph = package_graph("pkg", root=tmp_path)
    assert graph.back_arrows == [("pkg.run", "pkg.units.registry"), ("pkg.units.a.x", "pkg.units.b.y")]
    assert graph.unplaced == ["units.c"]
