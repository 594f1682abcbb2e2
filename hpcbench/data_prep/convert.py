"""The conversion pipeline shared by every source: plan, write shards in parallel, then publish.

1. Plan (cheap, before any pixel is decoded): cap per class / limit, stratified split, cut each
   split into shards of ``shard_samples`` items (or as many as fit ``shard_mb``).
2. Write: each shard is one task; tasks run on a process pool over the machine's cores, or over
   MPI ranks when started by ``mpiexec``/``srun`` (rank r writes shards r, r+W, …). A worker
   decodes its items, skips unreadable ones (or fails under ``strict``), writes the HDF5 file and
   its sha256, and returns its class counts and pixel sums.
3. Publish: the manifest (normalisation from the train sums), ``skipped.txt``, ``sources.txt`` and
   ``source_ids.txt`` (the listing's own ids, where it had them)
   are written into the temporary directory, which is renamed to the output at the very end.
   Any error (and SIGINT/SIGTERM, which the CLI turns into exceptions) removes the temporary
   directory: no half-written dataset is ever visible.

The output is checked before anything is written: it may not be, contain or lie inside what the
source reads (symbolic links resolved), and ``overwrite`` replaces only an existing hpcbench
dataset (a directory whose ``manifest.json`` says ``"format": "hpcbench-shards"``), never any
other directory.
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
import multiprocessing as mp
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hpcbench import __version__
from hpcbench.data.manifest import (
    DTYPES,
    DataError,
    Manifest,
    SplitInfo,
)
from hpcbench.data_prep.convert_worker import (
    Task,
    TaskResult,
    init_pool_worker,
    init_worker,
    run_task,
)
from hpcbench.data_prep.images import RESIZE_POLICIES
from hpcbench.data_prep.output_dir import check_output, swap_in
from hpcbench.data_prep.source import Source, Target
from hpcbench.data_prep.split import cap_per_class, given_split, parse_fractions, stratified_split

log = logging.getLogger(__name__)
DEFAULT_SHARD_MB = 64.0  # MosaicML Streaming's default shard size


@dataclass
class ConvertOptions:
    size: tuple[int, int] | None = None  # (width, height); None: the source's own size
    grayscale: bool | None = None  # None: as many channels as the source (1 or 3)
    dtype: str = "uint8"
    split: str = "85/2/13"
    shard_samples: int | None = None
    shard_mb: float = DEFAULT_SHARD_MB
    limit: int | None = None
    per_class: int | None = None
    seed: int = 0
    strict: bool = False
    workers: int | None = None  # None: all usable cores
    resize: str = "crop"
    overwrite: bool = False
    name: str | None = None
    progress: bool = True

    def check(self) -> None:
        if self.size is not None and (len(self.size) != 2 or min(self.size) < 1):
            raise DataError(f"--size must be WIDTHxHEIGHT with both >= 1, got {self.size}")
        if self.dtype not in DTYPES:
            raise DataError(f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.resize not in RESIZE_POLICIES:
            raise DataError(
                f"--resize must be one of {', '.join(RESIZE_POLICIES)}, got {self.resize!r}"
            )
        for flag, value in (
            ("--shard-samples", self.shard_samples),
            ("--limit", self.limit),
            ("--per-class", self.per_class),
            ("--workers", self.workers),
        ):
            if value is not None and value < 1:
                raise DataError(f"{flag} must be at least 1, got {value}")
        if not 0 < self.shard_mb < math.inf:
            raise DataError(f"--shard-size must be positive, got {self.shard_mb} MB")
        if self.seed < 0:
            raise DataError(f"--seed must be >= 0, got {self.seed}")
        parse_fractions(self.split)


def parse_size(text: str) -> tuple[int, int]:
    """``197x148`` -> (197, 148); ``64`` -> (64, 64)."""
    parts = text.lower().replace("*", "x").split("x")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise DataError(f"--size {text!r}: expected WIDTHxHEIGHT, e.g. 197x148") from None
    if len(values) == 1:
        values *= 2
    if len(values) != 2 or min(values) < 1:
        raise DataError(f"--size {text!r}: expected WIDTHxHEIGHT, e.g. 197x148")
    return values[0], values[1]


def parse_megabytes(text: str) -> float:
    """``64MB``, ``64``, ``1GB``, ``512k`` -> megabytes (2**20 bytes)."""
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    scale = {"k": 1 / 1024, "m": 1.0, "g": 1024.0}
    try:
        megabytes = float(t[:-1]) * scale[t[-1]] if t and t[-1] in scale else float(t)
    except ValueError:
        raise DataError(f"--shard-size {text!r}: expected a size like 64MB") from None
    if not math.isfinite(megabytes):
        raise DataError(f"--shard-size {text!r}: expected a finite size like 64MB")
    return megabytes


# ---- the coordinating side ------------------------------------------------------------------------
def _mpi_comm() -> Any | None:
    """COMM_WORLD when this process is one of several MPI ranks, else None."""
    from hpcbench.this_rank import detect_launch, is_mpi_launch

    info = detect_launch()
    if not is_mpi_launch(info, srun_counts=True):
        return None
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.Get_size() != info.world_size:
        raise DataError(
            f"{info.launcher} started {info.world_size} ranks but MPI sees {comm.Get_size()} "
            "(is mpi4py built against the MPI that launched it?)"
        )
    return comm


# what a conversion writes beside manifest and shards


def one_line(text: str) -> str:
    """A name or id as one line of sources.txt / source_ids.txt (line i is sample index i)."""
    return text.replace("\r", " ").replace("\n", " ")


def plan(source: Source, options: ConvertOptions, target: Target) -> list[Task]:
    labelled = len(source) - source.unlabeled_test
    keep = cap_per_class(
        source.labels[:labelled], options.per_class, options.limit, options.seed,
        len(source.classes),
    )  # fmt: skip
    for k, name in enumerate(source.classes):
        if not np.any(source.labels[keep] == k):
            raise DataError(f"class {name!r} has no samples to convert")
    if source.given_splits is not None:
        splits = given_split(np.asarray(source.given_splits)[keep], options.seed)
        if "train" not in splits:
            raise DataError("the split column names no train sample")
    else:
        fractions = parse_fractions(options.split)
        if source.unlabeled_test and "test" in fractions:
            raise DataError(
                f"--split {options.split}: the test split is the unlabeled test set; give "
                "train/val parts only (e.g. 90/10)"
            )
        splits = stratified_split(source.labels[keep], fractions, options.seed, source.classes)
    if source.unlabeled_test:
        # in the listing's order (by id where entries have one), unreadable images skipped
        unlabelled = np.arange(labelled, len(source), dtype=np.int64)
        keep = np.concatenate([keep, unlabelled])
        splits["test"] = np.arange(len(keep) - len(unlabelled), len(keep))
    w, h = target.size
    sample_bytes = target.channels * w * h * (1 if options.dtype == "uint8" else 2)
    per_shard = options.shard_samples or max(1, int(options.shard_mb * 2**20 // sample_bytes))
    tasks = []
    for name, positions in splits.items():
        items = keep[positions]
        for k in range(math.ceil(len(items) / per_shard)):
            tasks.append(Task(name, k, items[k * per_shard : (k + 1) * per_shard]))
    return tasks


def convert(
    source: Source,
    out: str | os.PathLike[str],
    options: ConvertOptions | None = None,
    use_mpi: bool = True,
) -> Manifest:
    """Convert ``source`` into a sharded dataset at ``out``; return its manifest.

    Under an MPI launcher every rank must call this (they share the shards) unless ``use_mpi``
    is False, in which case this process converts alone on a process pool."""
    options = options or ConvertOptions()
    options.check()
    out = Path(out)
    comm = _mpi_comm() if use_mpi else None
    rank = comm.Get_rank() if comm is not None else 0
    size = options.size or source.native_size
    if size is None:
        raise DataError(
            "--size is required for image files (e.g. --size 224x224): sources differ in size"
        )
    grayscale = options.grayscale if options.grayscale is not None else source.channels() == 1
    target = Target(tuple(size), "L" if grayscale else "RGB", options.resize)
    check_output(out, source, options.overwrite)
    tasks = plan(source, options, target)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    if comm is not None:
        tmp = Path(comm.bcast(str(tmp), root=0))
    started = time.monotonic()
    manifest: Manifest | None = None
    error: BaseException | None = None
    try:
        if rank == 0:
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp.mkdir()
        if comm is not None:
            comm.Barrier()
        results = _run_everywhere(tasks, source, target, options, tmp, comm)
        if rank == 0:
            manifest = _publish(
                results, source, target, options, tmp, out, time.monotonic() - started
            )
    except BaseException as err:
        error = err
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
    if comm is not None:  # every rank ends the same way: rank 0 says how
        outcome = comm.bcast(None if error is None else str(error), root=0)
        if rank != 0:
            if outcome is not None:
                raise DataError(outcome)
            return Manifest.load(out)
    if error is not None:
        raise error
    assert manifest is not None
    return manifest


def _run_everywhere(
    tasks: list[Task], source: Source, target: Target, options: ConvertOptions, tmp: Path, comm: Any
) -> list[TaskResult]:
    total = sum(len(t.items) for t in tasks)
    show = options.progress and (comm is None or comm.Get_rank() == 0)
    from hpcbench.progress import Progress

    if comm is not None:
        # One process per rank; rank 0's bar shows its own share, scaled to the whole.
        mine = tasks[comm.Get_rank() :: comm.Get_size()]
        init_worker(source, target, options, tmp, None)
        bar = Progress(total, f"converting on {comm.Get_size()} MPI ranks", enabled=show)
        results, error, done = [], None, 0
        try:
            for t in mine:
                results.append(run_task(t))
                done += len(t.items)
                bar.update(min(total, done * comm.Get_size()))
        except BaseException as err:  # noqa: BLE001 - reported by rank 0; a raise here would hang the gather
            error = str(err) if isinstance(err, DataError) else f"{type(err).__name__}: {err}"
        gathered = comm.gather((results, error), root=0)
        if comm.Get_rank() != 0:
            return []
        bar.close()
        errors = [e for _, e in gathered if e]
        if errors:
            raise DataError(errors[0])
        return [r for rs, _ in gathered for r in rs]

    workers = min(options.workers or len(os.sched_getaffinity(0)), max(1, len(tasks)))
    counter = mp.Value("q", 0)
    bar = Progress(total, f"converting with {workers} process(es)", enabled=show)
    if workers == 1:
        init_worker(source, target, options, tmp, counter)
        results = []
        for t in tasks:
            results.append(run_task(t))
            bar.update(counter.value)
        bar.close()
        return results
    with mp.get_context("fork" if sys.platform == "linux" else "spawn").Pool(
        workers, initializer=init_pool_worker, initargs=(source, target, options, tmp, counter)
    ) as pool:
        pending = pool.map_async(run_task, tasks, chunksize=1)
        while not pending.ready():
            pending.wait(0.1)
            bar.update(counter.value)
        results = pending.get()  # re-raises a worker's DataError
    bar.update(counter.value)
    bar.close()
    return results


def _splits(
    results: list[TaskResult], source: Source
) -> tuple[dict[str, SplitInfo], list[tuple[str, str]]]:
    """Each split's samples per class and shards, in task order, and the images skipped."""
    splits: dict[str, SplitInfo] = {}
    skipped: list[tuple[str, str]] = []
    for name in ("train", "val", "test"):
        mine = sorted((r for r in results if r.split == name), key=lambda r: r.number)
        if not mine:
            continue
        counts = np.sum([r.class_counts for r in mine], axis=0).astype(int).tolist()
        shards = [r.shard for r in mine if r.shard is not None]
        if name == "test" and source.unlabeled_test:
            splits[name] = SplitInfo(sum(x.samples for x in shards), [], shards, labeled=False)
        else:
            splits[name] = SplitInfo(sum(counts), counts, shards)
        for r in mine:
            skipped += r.skipped
    return splits, skipped


def _publish(
    results: list[TaskResult],
    source: Source,
    target: Target,
    options: ConvertOptions,
    tmp: Path,
    out: Path,
    seconds: float,
) -> Manifest:
    splits, skipped = _splits(results, source)
    train = [r for r in results if r.split == "train"]
    pixels = sum(r.pixels for r in train)
    if pixels == 0:
        raise DataError("no readable training images: nothing to convert")
    mean = np.sum([r.sums for r in train], axis=0) / pixels
    var = np.sum([r.squares for r in train], axis=0) / pixels - mean**2
    std = np.sqrt(np.maximum(var, 1e-12))
    w, h = target.size
    opts = {
        k: v for k, v in asdict(options).items() if k not in ("overwrite", "progress", "workers")
    }
    opts["size"] = [w, h]
    opts["seconds"] = round(seconds, 2)
    manifest = Manifest(
        name=options.name or out.name,
        classes=list(source.classes),
        shape=[target.channels, h, w],
        dtype=options.dtype,
        splits=splits,
        mean=mean.tolist(),
        std=std.tolist(),
        options=opts,
        source=source.describe,
        skipped=len(skipped),
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        hpcbench_version=__version__,
    )
    if skipped:
        (tmp / "skipped.txt").write_text("".join(f"{n}\t{why}\n" for n, why in skipped))
    if source.names is not None:
        (tmp / "sources.txt").write_text("".join(one_line(n) + "\n" for n in source.names))
    if source.ids is not None and any(source.ids):
        (tmp / "source_ids.txt").write_text("".join(one_line(i) + "\n" for i in source.ids))
    manifest.save(tmp)
    swap_in(tmp, out)
    manifest.root = out
    log.info("wrote %s", out)
    return manifest
