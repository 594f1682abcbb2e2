"""Predicting data-parallel training beyond the machine at hand: a calibration run inside an
allocation (:mod:`.calibrate`, ``python -m hpcbench.scaling``), a model of step time, throughput
and efficiency at N ranks fitted to it (:mod:`.model`), and the predictions as a table
(:mod:`.predictions`, ``hpcbench predict-scaling``). The model and the table need neither torch
nor MPI."""
