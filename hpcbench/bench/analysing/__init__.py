"""Analysing results: speedup, efficiency, energy, accounting, cost estimates, comparisons and reference checks."""
