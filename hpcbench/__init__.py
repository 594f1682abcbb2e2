"""hpcbench: job scripts, parallel training and measured comparisons for PyTorch on HPC clusters.

This package is imported on login nodes and laptops: it must stay light (no torch, no numpy).
What a notebook needs is in :mod:`hpcbench.api`.
"""

from __future__ import annotations

import os as _os
import sys as _sys
from importlib.machinery import ModuleSpec  # loaded at start-up already: costs nothing

__version__ = "0.1.0"


class _CheckoutFolders:
    """The wheel ships the repository's ``data_prep/`` and ``templates/`` inside this package
    (``hpcbench.data_prep``, ``hpcbench.templates``). Imported from a source checkout that is not
    installed (``PYTHONPATH`` = the checkout), these two names are found where they live, at the
    top of the repository; nothing else of the checkout becomes part of the package."""

    def __init__(self, checkout: str) -> None:
        self.folders = {
            f"{__name__}.{name}": _os.path.join(checkout, name)
            for name in ("data_prep", "templates")
        }

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> ModuleSpec | None:
        folder = self.folders.get(fullname)
        if folder is None or not _os.path.isfile(_os.path.join(folder, "__init__.py")):
            return None
        init = _os.path.join(folder, "__init__.py")
        from importlib.util import spec_from_file_location

        return spec_from_file_location(fullname, init, submodule_search_locations=[folder])


if not _os.path.isdir(_os.path.join(__path__[0], "data_prep")):
    _sys.meta_path.append(
        _CheckoutFolders(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))))
    )
