"""The types of a sweep's documents: ``sweep.json`` (:class:`SweepDocument`: the sweep as run,
:class:`SweepRecord`, from :meth:`hpcbench.sweep.plan.Sweep.to_dict`, and its tasks,
:class:`TaskRecord`, each with its :data:`Setting`), ``submissions.json``
(:class:`SubmissionsDocument`, one :class:`Submission` per array job), both written by
:mod:`hpcbench.sweep.runner`; and the analysis of a sweep's results directory
(:func:`hpcbench.sweep.analysis.analyse_sweep`: :class:`SweepAnalysis`, one
:class:`SettingResult` per setting and one :class:`TaskResult` per task), which the report reads.
Types only."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from hpcbench.bench.matrix_program import ProgramTable

if TYPE_CHECKING:
    from typing_extensions import NotRequired

    from hpcbench.bench.stats import Stat

#: one value of an axis: a trainer option's (or a program's ``{axis}``) value, as TOML gives it
AxisValue = str | int | float | bool | list["AxisValue"]
#: a setting: axis -> its value in this setting
Setting = dict[str, AxisValue]


class SweepProgram(ProgramTable, total=False):
    """A sweep's program table: a matrix's (module, script or command), ``args`` when a job
    spec's program is made of it."""

    args: list[str]


class TaskRecord(TypedDict):
    """One task of ``sweep.json``: the ``index``-th run of the plan (from 1), its setting, its
    repetition and its run directory's name under ``runs/``."""

    index: int
    setting: Setting
    rep: int
    run: str


class SweepRecord(TypedDict):
    """The sweep as ``sweep.json`` records it (what a continued sweep must still be)."""

    name: str
    job: str | None
    trainer_args: list[str]
    mode: str
    draws: int | None
    seed: int
    repetitions: int
    metric: str
    axes: dict[str, list[AxisValue]]
    smoke: bool
    program: ProgramTable | None
    program_args: list[str]


class SweepDocument(TypedDict):
    """``sweep.json`` (format ``hpcbench-sweep/1``)."""

    format: str
    created: str
    sweep: SweepRecord
    tasks: list[TaskRecord]
    provenance: dict[str, str | None]
    login: NotRequired[dict[str, str]]


class Submission(TypedDict):
    """One array job of ``submissions.json``: its tasks and their ids."""

    number: int
    job_id: str
    scheduler: str
    tasks: list[int]
    task_ids: list[str]
    script: str
    submitted: float


class SubmissionsDocument(TypedDict):
    """``submissions.json`` (format ``hpcbench-sweep-submissions/1``)."""

    format: str
    submissions: list[Submission]


class MetricInfo(TypedDict):
    """What ranks the settings: its name, in words, which way is better, its unit."""

    name: str
    words: str
    higher_is_better: bool
    unit: str


class EpochMedians(TypedDict):
    epoch: int
    val_accuracy: float | None
    train_accuracy: float | None


class SettingResult(TypedDict):
    """One setting over its runs: the metric and the times (STATs), the per-epoch medians."""

    name: str
    setting: Setting
    runs: int
    failed: int
    metric: Stat | None
    total_s: Stat | None
    train_s: Stat | None
    epochs: list[EpochMedians]


class TaskResult(TaskRecord):
    """One task as the analysis found it: completed, and its metric."""

    completed: bool
    metric: float | None


class SweepAnalysis(TypedDict):
    """The analysis of a sweep's results directory (JSON-able)."""

    sweep: SweepRecord
    metric: MetricInfo
    settings: list[SettingResult]
    ranking: list[str]
    tasks: list[TaskResult]
    classes: int | None
