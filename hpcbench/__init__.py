"""hpcbench: job scripts, parallel training and measured comparisons for PyTorch on HPC clusters.

This package is imported on login nodes and laptops: it must stay light (no torch, no numpy).
What a notebook needs is in :mod:`hpcbench.api`.
"""

__version__ = "0.1.0"
