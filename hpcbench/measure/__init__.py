"""Measure any training: a few lines in the user's own loop give the documents hpcbench's trainer
writes, so that ``hpcbench report``, ``compare``, ``history``, ``check``, benchmark matrices and
sweeps work on the user's code unchanged::

    from hpcbench import measure

    with measure.run(model="my_resnet", dataset="imagenet-100") as m:
        with m.phase("setup"):
            model, loader = build()
        for epoch in range(epochs):
            with m.phase("train"):
                for x, y in loader:
                    train_step(x, y)
                    m.step(samples=len(x))
            with m.phase("val"):
                accuracy = validate()
            m.epoch(train_loss=loss, val_accuracy=accuracy)
        with m.phase("test"):
            m.final(test_accuracy=test())

Every rank runs the same calls; each learns its place (rank, world size, local rank, node) from
its launcher's environment (torchrun, Open MPI's or MPICH's mpiexec, srun, submitit, hpcbench's
local scheduler, or none: one process) and the run directory from its job (``$HPCBENCH_RUN_DIR``)
or ``run_dir=``. At the end rank 0 writes ``metrics.json``, ``epochs.csv`` and, with
``energy=True``, ``energy.json``. The plain form is ``m = measure.start(...)`` …
``m.finish()``. A measurement never raises into the loop: a fault is a warning, recorded in the
documents. No torch is imported here; nothing synchronises a GPU.
"""

from __future__ import annotations

from hpcbench.measure.recorder import Measurement, MeasureWarning, run, start
from hpcbench.measure.settings import settings

__all__ = ["MeasureWarning", "Measurement", "run", "settings", "start"]
