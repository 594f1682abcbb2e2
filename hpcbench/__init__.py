"""hpcbench: job scripts, parallel training and measured comparisons for PyTorch on HPC clusters.

This package is imported on login nodes and laptops: it must stay light (no torch, no numpy).
What a notebook needs is in :mod:`hpcbench.api`.
"""

import os as _os

__version__ = "0.1.0"

# The wheel ships the repository's data_prep/ and templates/ inside this package. Imported from a
# source checkout that is not installed (PYTHONPATH=the checkout), the package finds them at the
# top of the repository instead, where they live.
_checkout = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if not _os.path.isdir(_os.path.join(__path__[0], "data_prep")) and _os.path.isfile(
    _os.path.join(_checkout, "data_prep", "__init__.py")
):
    __path__.append(_checkout)
