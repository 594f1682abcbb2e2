"""The import paths the API reference documented before ``hpcbench.bench`` was grouped into running,
reading, analysing and reporting, kept for one release.

``import hpcbench.bench.report`` still works: a finder on ``sys.meta_path`` answers an old name with
the module under its new name (the same module object, so that a monkeypatch or an ``isinstance``
through either name sees one thing) and warns once with a :class:`DeprecationWarning` naming the new
path. New code uses the new paths.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

OLD_PATHS: dict[str, str] = {
    "hpcbench.bench.matrix": "hpcbench.bench.running.matrix",
    "hpcbench.bench.results_reader": "hpcbench.bench.reading.results_reader",
    "hpcbench.bench.analysis": "hpcbench.bench.analysing.analysis",
    "hpcbench.bench.comparison": "hpcbench.bench.analysing.comparison",
    "hpcbench.bench.accounting": "hpcbench.bench.analysing.accounting",
    "hpcbench.bench.estimates": "hpcbench.bench.analysing.estimates",
    "hpcbench.bench.references": "hpcbench.bench.analysing.references",
    "hpcbench.bench.key_figures": "hpcbench.bench.analysing.key_figures",
    "hpcbench.bench.tables": "hpcbench.bench.reporting.tables",
    "hpcbench.bench.report": "hpcbench.bench.reporting.report",
}


class _Loader(importlib.abc.Loader):
    """Hands back the module under its new name instead of creating one."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{spec.name} moved to {self.new}; the old path goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module under its new name is already executed."""


class OldPathFinder(importlib.abc.MetaPathFinder):
    """Finds the old names of :data:`OLD_PATHS`, and nothing else."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = OLD_PATHS.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Loader(new))


def install() -> None:
    """Puts the finder on ``sys.meta_path`` once (importing ``hpcbench.bench`` does it)."""
    if not any(isinstance(finder, OldPathFinder) for finder in sys.meta_path):
        sys.meta_path.append(OldPathFinder())
