"""Hyperparameter sweeps: a sweep file planned into settings (:mod:`hpcbench.sweep.plan`), run
as one array job (:mod:`hpcbench.sweep.runner`, or submitit's ``map_array`` in
:mod:`hpcbench.sweep.notebook`) and reported (:mod:`hpcbench.sweep.analysis`,
:mod:`hpcbench.sweep.report`)."""
