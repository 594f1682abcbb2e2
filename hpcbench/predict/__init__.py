"""Parallel inference with a model the trainer checkpointed: ``python -m hpcbench.predict``.

Under mpiexec or srun the ranks form a pipeline -- readers -> preprocessors (decode, resize,
normalise: the converters' and the trainer's transforms) -> predictors -> one sink -- with
credit-based backpressure on every link and stage sizes chosen from a measured profile
(``--roles auto``); a plain data-parallel mode and a single-process loop serve as comparisons.
docs/predict.md describes the options, the sizing and the per-stage report.

Modules: :mod:`.config` (options), :mod:`.model` (checkpoint -> model and input format),
:mod:`.inputs` (what to classify), :mod:`.stages` (the work per unit, and its wire format),
:mod:`.entry` (one run: the mode chosen, the set-up shared), the modes :mod:`.single`,
:mod:`.data_parallel` and :mod:`.pipeline_mode` (with :mod:`.profile`: calibration, :mod:`.plan`:
sizing, :mod:`.pipeline_ranks`: the MPI roles), :mod:`.rank` (what every rank does alike) and
:mod:`.outputs` (predictions.csv, predict.json).

From Python::

    from hpcbench.predict import run_prediction
    report = run_prediction(["--checkpoint", "runs/train-1", "--input", "photos/"])
"""

from hpcbench.predict.config import PredictConfig, PredictError, Roles, parse_roles
from hpcbench.predict.entry import run_prediction

__all__ = ["PredictConfig", "PredictError", "Roles", "parse_roles", "run_prediction"]
