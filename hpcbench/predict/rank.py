"""What every rank of a prediction run does alike, whatever its mode: its memory figures, its
device and threads, its copy of the weights, its row of the report, its failure drills, and how a
failure stops every rank (:func:`abort`) or every rank together (:class:`AgreedError`)."""

from __future__ import annotations

import os
import resource
import socket
import sys
import time
from typing import Any

from hpcbench.predict.config import PredictConfig, PredictError
from hpcbench.predict.model import DEFAULT_BATCH, Classifier, LoadedModel, load

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_mb() -> float:
    """This process's resident size now (MB)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * _PAGE / 2**20
    except OSError:
        return peak_rss_mb()


def reset_peak_rss() -> None:
    """Start the peak resident size afresh (Linux: ``5`` to ``/proc/self/clear_refs``), so the
    run's peak is not the checkpoint load's or the calibration's."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def peak_rss_mb() -> float:
    """The peak resident size since :func:`reset_peak_rss` (VmHWM), else over the life."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 1024 if sys.platform != "darwin" else kb / 2**20


def warn(message: str) -> None:
    """A line on stderr."""
    print(message, file=sys.stderr, flush=True)


def device_for(config: PredictConfig, local_index: int) -> str:
    """The device of the ``local_index``-th predictor of a node (GPUs shared in turn)."""
    if config.device == "cpu":
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return f"cuda:{local_index % torch.cuda.device_count()}"
    if config.device == "cuda":
        raise PredictError("--device cuda: no CUDA device is visible to this rank")
    return "cpu"


def set_threads(n: int) -> None:
    """Torch's intra-op threads for this rank."""
    import torch

    torch.set_num_threads(max(1, n))


#: this rank's role, named in its failure report
ROLE: dict[str, str] = {}


class AgreedError(PredictError):
    """Every rank stops on this error together (rank 0 printed it)."""


def abort(comm: Any, rank: int, role: str, err: BaseException) -> None:
    """Print this rank's failure, then stop every rank (nothing waits on a dead peer)."""
    import traceback

    if isinstance(err, PredictError):
        print(f"hpcbench predict: rank {rank} ({role}): error: {err}", file=sys.stderr, flush=True)
        code = 2
    else:
        print(f"hpcbench predict: rank {rank} ({role}) failed: {type(err).__name__}: {err}",
              file=sys.stderr, flush=True)  # fmt: skip
        traceback.print_exception(err)
        sys.stderr.flush()
        code = 1
    err.hpcbench_reported = True  # type: ignore[attr-defined]
    time.sleep(1.0)  # let the launcher relay this rank's lines before the abort tears it down
    comm.Abort(code)


def visible_gpus(config: PredictConfig) -> list[str]:
    """The GPUs this rank could predict on, as IDs (NVML's UUIDs, as CUDA_VISIBLE_DEVICES selects
    them; else that variable's entries), without importing torch or starting CUDA (readers and
    the sink never load either). A node's GPUs are the distinct IDs of its ranks: one GPU bound
    to each task counts as many GPUs as tasks. None known (--device cpu, no NVML, no variable):
    predictors are not taken to share anything."""
    if config.device == "cpu":
        return []
    from hpcbench.energy.nvml import visible_uuids

    spec = os.environ.get("CUDA_VISIBLE_DEVICES")
    found = visible_uuids(spec)
    if found is not None:
        return found
    return [f"cuda-visible:{t.strip()}" for t in (spec or "").split(",") if t.strip()]


def with_weights(loaded: LoadedModel) -> LoadedModel:
    """This rank's copy of the weights (read from the checkpoint file rank 0 chose)."""
    return load(str(loaded.path), warn)


def rank_row(
    rank: int,
    counters: Any,
    start_rss: float,
    threads: int,
    extra: dict | None = None,
    classifier: Classifier | None = None,
) -> dict[str, Any]:
    """A rank's figures. Memory: ``rss_at_start_mb`` is the host memory once set up (on a GPU
    the device's context and libraries included: a warm-up forward loaded them),
    ``growth_mb`` what the run's units took on top (what the plan's bound limits), and
    ``device_peak_mb`` a GPU predictor's peak device memory (None on CPUs)."""
    peak = peak_rss_mb()
    row = {
        "rank": rank,
        "host": socket.gethostname(),
        **counters.as_dict(),
        "threads": threads,
        "rss_at_start_mb": start_rss,
        "peak_rss_mb": peak,
        "growth_mb": max(0.0, peak - start_rss),
        "device_peak_mb": classifier.device_peak_mb() if classifier is not None else None,
    }
    if extra:
        row.update(extra)
    return row


def agreed_on(rank: int, message: str) -> AgreedError:
    """The error every rank raises together; rank 0 prints it."""
    if rank == 0:
        print(f"hpcbench predict: error: {message}", file=sys.stderr, flush=True)
    err = AgreedError(message)
    err.hpcbench_reported = True  # type: ignore[attr-defined]
    return err


def drilled(rank: int) -> Any:
    """Wrap a stage's work in this rank's failure drill (``HPCBENCH_FAIL_AT=RANK:UNIT[:MODE]``,
    counted in units this rank has worked on), if one names it."""
    from hpcbench.train.drills import act, drill_for

    drill = drill_for(rank)

    def wrap(fn: Any) -> Any:
        if drill is None:
            return fn
        done = [0]

        def wrapped(*args: Any) -> Any:
            act(drill, done[0], "unit", "hpcbench predict")
            done[0] += 1
            return fn(*args)

        return wrapped

    return wrap


def slow_predictor_drill() -> float:
    """``HPCBENCH_PREDICT_SLOW=SECONDS``: each predictor sleeps this long per unit (a drill for
    the backpressure test: readers then run far ahead unless credits hold them)."""
    text = os.environ.get("HPCBENCH_PREDICT_SLOW", "")
    try:
        return max(0.0, float(text)) if text else 0.0
    except ValueError:
        raise PredictError(f"HPCBENCH_PREDICT_SLOW={text!r}: expected seconds") from None


def size_units(config: PredictConfig, classifier: Classifier) -> None:
    """``--batch-size`` unset: 32 on a CPU; on a GPU the smallest unit whose per-image cost is
    within 10 % of the best of 32-512 (a GPU fed 32 images at a time waits on the host)."""
    if config.batch_size is not None:
        return
    if classifier.device.type != "cuda":
        config.batch_size = DEFAULT_BATCH
        return
    config.batch_size = classifier.sized_batch()
    if not config.quiet:
        print(
            f"unit size: {config.batch_size} images (measured on {classifier.device})", flush=True
        )


def slow_link_drill() -> float:
    """``HPCBENCH_PREDICT_SLOW_LINK=SECONDS``: the calibration adds this to each unit's measured
    transfer, as a slow interconnect would (a drill: every split then costs more than it saves)."""
    text = os.environ.get("HPCBENCH_PREDICT_SLOW_LINK", "")
    try:
        return max(0.0, float(text)) if text else 0.0
    except ValueError:
        raise PredictError(f"HPCBENCH_PREDICT_SLOW_LINK={text!r}: expected seconds") from None
