"""The runs of a matrix and their order: round 1 of every configuration, then round 2 …, each
round's energy runs after its timing runs (:mod:`hpcbench.bench.running.runner` runs them). A run is recorded in
``runs.json`` as a :class:`~hpcbench.bench.reading.results_documents.RunRecord`."""

from __future__ import annotations

from dataclasses import dataclass

from hpcbench.bench.running.matrix import Matrix
from hpcbench.bench.running.run_specs import ENERGY, TIMING


@dataclass
class Run:
    """One run of one configuration (a record of ``runs.json``)."""

    config: str
    kind: str
    rep: int
    status: str = "pending"
    job_id: str | None = None
    scheduler: str | None = None
    run_dir: str | None = None
    started: float | None = None
    ended: float | None = None
    error: str = ""
    stdout: str | None = None
    stderr: str | None = None
    script: str | None = None
    # local scheduler: the other work found on the machine as the run started ("" for none)
    shared: str = ""

    @property
    def label(self) -> str:
        return f"{self.config} {self.kind} {self.rep}"


def plan(matrix: Matrix) -> list[Run]:
    """Every run of the matrix, in the order they run (see the module's docstring)."""
    runs = []
    for rnd in range(1, max(matrix.repetitions, matrix.energy_repetitions) + 1):
        for kind, count in ((TIMING, matrix.repetitions), (ENERGY, matrix.energy_repetitions)):
            if rnd <= count:
                runs += [Run(c.name, kind, rnd) for c in matrix.configs]
    return runs
