"""Sphinx configuration of the documentation site: the Markdown pages of docs/ (MyST), the Furo
theme and an API reference generated from the docstrings (autodoc). Build it with ``make docs``
(into build/docs); tests/unit/test_docs_site.py builds it with warnings as errors."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # hpcbench from this checkout, installed or not

from hpcbench import __version__  # noqa: E402

project = "hpcbench"
author = "the hpcbench developers"
copyright = "the hpcbench developers"
release = version = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

myst_heading_anchors = 3
html_theme = "furo"
html_title = f"hpcbench {release}"

# The reader's page imports torch; a docs-only install (pip install '.[docs]') has no torch, and
# autodoc then documents the reader against a stand-in for it (with torch installed, the real one).
try:
    import torch  # noqa: F401
except ImportError:
    autodoc_mock_imports = ["torch"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
