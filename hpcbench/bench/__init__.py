"""The benchmark matrix: ``hpcbench bench`` runs it, ``hpcbench report`` and ``compare`` read it.

Grouped by what each part does: :mod:`.running` (the matrix and its runs), :mod:`.reading` (a
results directory), :mod:`.analysing` (speedup, efficiency, energy, accounting, estimates,
comparisons, references) and :mod:`.reporting` (report.md and report.html). The paths the API
reference documented before the grouping still import, with a warning (:mod:`.old_paths`).
"""

from hpcbench.bench import old_paths

old_paths.install()
