"""The types of a results directory's own documents, which :mod:`hpcbench.bench.running.runner` writes
and :mod:`hpcbench.bench.reading.results_reader` reads: ``bench.json`` (:class:`BenchDocument`: the
matrix as it started, :class:`MatrixRecord` of :class:`ConfigRecord`, from
:meth:`hpcbench.bench.running.matrix.Matrix.to_dict`; the submitting machine's
:data:`BenchProvenance`; the :data:`EstimateFactors`) and ``runs.json`` (:class:`RunsDocument`,
one :class:`RunRecord` per :class:`hpcbench.bench.running.run_plan.Run`). Types only: the modules that
build them import these, never the other way round."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from typing_extensions import NotRequired

    from hpcbench.bench.analysis_types import Factors
    from hpcbench.bench.matrix_program import ProgramTable

#: the carbon and cost factors, checked (:func:`hpcbench.bench.analysing.estimates.check_factors`)
EstimateFactors = dict[str, "float | str"]
#: reference values with tolerances per configuration and figure (:mod:`.references`)
References = dict[str, dict[str, list[Any]]]


class ConfigRecord(TypedDict):
    """One configuration as ``bench.json`` records it (:meth:`Config.to_dict`)."""

    name: str
    strategy: str
    device: str
    nodes: int
    ranks_per_node: int
    launcher: str
    trainer_args: list[str]
    program_args: list[str]
    devices: int
    world_size: int


class MatrixRecord(TypedDict):
    """The matrix as ``bench.json`` records it (:meth:`Matrix.to_dict`)."""

    name: str
    repetitions: int
    energy_repetitions: int
    cooldown_s: float
    energy_interval_s: float
    idle_seconds: float
    job: str | None
    trainer_args: list[str]
    program: ProgramTable | None
    program_args: list[str]
    baseline_cpu: str | None
    baseline_one_device: str | None
    configs: list[ConfigRecord]
    estimates: EstimateFactors
    reference: References


#: what the submitting machine tells of a matrix (``bench.json``'s ``provenance``): the versions
#: of :data:`hpcbench.bench.running.provenance.VERSIONED`, python, platform, submit_host, profile, git (None: not known)
BenchProvenance = dict[str, "str | None"]


class RunRecord(TypedDict):
    """One record of ``runs.json``: a :class:`Run` as :func:`dataclasses.asdict` gives it."""

    config: str
    kind: str
    rep: int
    status: str
    job_id: str | None
    scheduler: str | None
    run_dir: str | None
    started: float | None
    ended: float | None
    error: str
    stdout: str | None
    stderr: str | None
    script: str | None
    shared: str


class RunsDocument(TypedDict):
    """``runs.json``: format ``hpcbench-runs/1``, every run of the matrix."""

    format: str
    runs: list[RunRecord]


class BenchDocument(TypedDict):
    """``bench.json``: format ``hpcbench-bench/1``, the matrix as it started, the submitting
    machine's provenance (:func:`hpcbench.bench.running.provenance.provenance`), the estimate factors
    and (submitted from afar) the login node's fields."""

    format: str
    created: str
    matrix: MatrixRecord
    provenance: BenchProvenance
    estimates: Factors
    login: NotRequired[dict[str, str]]
