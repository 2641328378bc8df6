"""Modules and names imported on first use: what ``import evstore`` need not pay for."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any


class LazyModule:
    """Stands for the module ``name``: the first attribute read imports it (``sys.modules``
    keeps it; each later read is one dict lookup more than a plain module's)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attribute: str) -> Any:
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attribute)


def lazy_names(package: str, module: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` (PEP 562) for ``module``: each name of ``names`` is read from the
    module of ``package`` that the table gives for it, imported on first use, and then kept in
    ``module``'s namespace (later lookups do not come here); any other name is an AttributeError."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{names[name]}"), name)
        setattr(sys.modules[module], name, value)
        return value

    return __getattr__
