"""Hyperparameter sweeps: a sweep file planned into settings (:mod:`.plan`), run as one array job (:mod:`.runner`) and reported (:mod:`.report`)."""
