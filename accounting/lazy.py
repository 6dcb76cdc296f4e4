"""Package exports read from their modules on first use (PEP 562), for start-up time.

A package whose ``__init__.py`` imported its exports eagerly made ``import package.errors``
(a parser, a refused command) pay for every module behind them: ``accounting`` for numpy,
pydantic and the accountants, ``planner`` for scipy and the whole planner
(docs/architecture.md, "Command line"). :class:`LazyPackage` reads a package's
``_EXPORTS`` (exported name -> module) instead.
"""

from __future__ import annotations

import importlib
import types
from typing import Any


class LazyPackage(types.ModuleType):
    """A package whose exported names (its ``_EXPORTS``) are imported from their modules when
    first read, and whose exported function stays the function when a submodule of the same
    name is imported (``accounting.epsilon``, ``planner.replan``, ``planner.sweep``).

    Importing a submodule binds it on its package; while a package imported its exports
    eagerly, its own ``from package.sub import sub`` came after and rebound the function.
    Lazily, a submodule bound under an exported name is not kept: the export is read instead.
    A module's class may be a subclass of ModuleType (the language reference, "Customizing
    module attribute access"); set it with ``sys.modules[__name__].__class__ = LazyPackage``.
    """

    def _exports(self) -> dict[str, str]:
        exports: dict[str, str] = self.__dict__.get("_EXPORTS", {})
        return exports

    def __getattr__(self, name: str) -> Any:
        module = self._exports().get(name)
        if module is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        self.__dict__[name] = value
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and name in self._exports():
            return  # the export is read instead (``__getattr__``)
        super().__setattr__(name, value)

    def __dir__(self) -> list[str]:
        return sorted(set(self.__dict__) | set(self._exports()))
