"""The types of the analysis of a results directory (:func:`hpcbench.bench.analysing.analysis.analyse`,
its layout in docs/benchmarking.md), which the tables, the figures, the report, ``compare`` and
``history`` read: :class:`Analysis`, one :class:`ConfigAnalysis` per configuration with its
:class:`TimeStats`, :class:`RunCounts`, :class:`Accuracy`, :class:`EnergyBlock` (per kind of
device :class:`KindEnergy`), :class:`AccountingBlock` and :class:`EstimateBlock`, and the
:class:`Comparison` of two configurations, the :class:`Batches` and the :class:`Factors`.
Statistics are :class:`hpcbench.bench.stats.Stat` (over repetitions) and
:class:`hpcbench.bench.stats.Estimate` (a ratio with its interval). No code here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from hpcbench.bench.stats import Estimate, Stat


class Baselines(TypedDict):
    cpu: str | None
    one_device: str | None


class RunCounts(TypedDict):
    """A configuration's runs: completed, failed, and the completed timing and energy runs."""

    completed: int
    failed: int
    timing: int
    energy: int


class TimeStats(TypedDict):
    """Seconds per phase over the timing runs (:data:`hpcbench.bench.reading.results_reader.PHASES`)."""

    total: Stat | None
    setup: Stat | None
    train: Stat | None
    val: Stat | None
    test: Stat | None


class Accuracy(TypedDict):
    """The test accuracy over the runs, and the median validation accuracy per epoch."""

    final: Stat | None
    per_epoch: list[list[float]]  # [epoch, median validation accuracy]


class SourceGroup(TypedDict):
    method: str
    interval_s: float
    devices: list[str]


class KindEnergy(TypedDict, total=False):
    """One kind of device's energy (gpu, cpu, dram): None with ``reason`` where unread."""

    available: bool
    reason: str
    used_j: Stat | None
    per_sample_j: Stat | None
    edp: float | None
    ed2p: float | None
    edp_norm: float | None
    ed2p_norm: float | None


class EnergyBlock(KindEnergy, total=False):
    """A configuration's energy over its energy runs (:func:`hpcbench.bench.analysing.energy_results.energy_block`):
    joules used, with the idle devices and net of idle power, EDP and ED²P (also as multiples of
    the one-device baseline's), per kind of device, and the sources."""

    with_idle_reason: str
    net_reason: str
    window: str
    sources: list[str]
    source_groups: list[SourceGroup]
    with_idle_j: Stat | None
    net_j: Stat | None
    seconds: Stat | None
    edp_with_idle: float | None
    ed2p_with_idle: float | None
    edp_with_idle_norm: float | None
    ed2p_with_idle_norm: float | None
    by_kind: dict[str, KindEnergy]
    partial: str


class AccountingBlock(TypedDict, total=False):
    """A configuration's accounting over its runs' records
    (:func:`hpcbench.bench.analysing.accounting.accounting_block`)."""

    available: bool
    runs: int
    source: str | None
    reason: str | None
    energy_source: str
    states: dict[str, int]
    queue_wait_s: Stat | None
    elapsed_s: Stat | None
    cpu_efficiency: Stat | None
    max_rss_bytes: Stat | None
    memory_used_bytes: Stat | None
    scheduler_energy_j: Stat | None
    energy_reason: str
    energy_ratio: float | None
    cpus_used: Stat | None
    cpus: int | None
    memory_allocated_bytes: float | None
    hints: list[str]


class CostEstimate(TypedDict):
    """Carbon and cost of a run, or of a configuration's runs (None: a factor is missing)."""

    facility_kwh: float | None
    co2e_g: float | None
    energy_cost: float | None
    allocation_cost: float | None


class EstimateBlock(TypedDict, total=False):
    """A configuration's estimates (:func:`hpcbench.bench.analysing.estimates.estimate_block`)."""

    per_run: CostEstimate
    per_config: CostEstimate
    runs: int
    energy_basis: str | None
    currency: str
    time_basis: str | None
    sources: dict[str, str]


class Factors(TypedDict):
    """The estimate factors a matrix ran with, and where each came from."""

    values: dict[str, float | str]
    sources: dict[str, str]


class ConfigAnalysis(TypedDict, total=False):
    """One of ``configs``: a configuration's runs and figures (``accounting`` and ``estimates``
    added once every configuration's energy is known)."""

    name: str
    devices: int
    device: str | None
    nodes: int
    strategy: str | None
    world_size: int | None
    global_batch: int | None
    runs: RunCounts
    time: TimeStats
    speedup_vs_cpu: Estimate | None
    speedup_vs_one_device: Estimate | None
    speedup_train_vs_one_device: Estimate | None
    efficiency: Estimate | None
    efficiency_train: Estimate | None
    karp_flatt: Estimate | None
    karp_flatt_train: Estimate | None
    accuracy: Accuracy
    throughput: Stat | None
    energy: EnergyBlock
    accounting: AccountingBlock
    estimates: EstimateBlock | None


class Comparison(TypedDict):
    """Configuration ``a`` against ``b`` on one metric: one of ``differences`` (``ratio`` the
    ratio of medians) or of ``pairwise`` (``ratio`` an :class:`Estimate`); ``n``: each side's
    runs."""

    a: str
    b: str | None
    metric: str
    ratio: Estimate | float
    significant: bool
    n: list[int]


class Batches(TypedDict):
    """The configuration the others are held to, its global batch, and those of another one."""

    reference: str | None
    global_batch: int | None
    different: dict[str, int]


class Analysis(TypedDict, total=False):
    """What :func:`hpcbench.bench.analysing.analysis.analyse` returns, JSON-able: per configuration
    (``configs``) its times, speedups, efficiency, Karp–Flatt, accuracy, throughput and energy;
    the differences from the one-device baseline and the sentences saying it."""

    name: str | None
    baselines: Baselines
    configs: list[ConfigAnalysis]
    differences: list[Comparison]
    pairwise: list[Comparison]
    batches: Batches
    energy_asked: bool
    sentences: list[str]
