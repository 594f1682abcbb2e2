"""The benchmark matrix: ``hpcbench bench`` runs it, ``hpcbench report`` and ``compare`` read it."""
