"""Per-rank telemetry: every few seconds, one small record of what this rank did since the last
one, appended to ``RUN_DIR/telemetry/rank-N.jsonl`` (one JSON object a line), for
``hpcbench watch`` while the run goes on and for the report's straggler section afterwards.

A record (format :data:`FORMAT`): ``rank``, ``host``, ``world``, ``t`` (Unix time), ``epoch``,
``step`` (training steps so far, all epochs), ``of`` and ``epochs`` (steps and epochs in the
whole run, when known),
``samples`` (so far, this rank), then over the interval: ``steps``, ``wall_s``,
``samples_per_s`` (this rank's), and per step
``compute_s`` (the time before the collective: the step less its data wait and its
communication, which is where the other ranks wait for a slow one), ``data_s`` and ``comm_s``;
``loss`` (the last one, read once per record: no host–device synchronisation per step),
``cpu_cores``, ``rss_mb``, ``gpu_util``, ``gpu_mem_mb`` (:mod:`.device_use`; ``None`` where not
readable), and ``not_measured``, where there are any: the parts of a step (``data``, ``comm``)
the program does not mark (their times null, never a guessed 0).

Bounded for a run of days: at :data:`MAX_RECORDS` records the file is rewritten with each pair of
neighbours in its older half merged into one (sums summed, per-step means weighted by steps), so
a file never holds more than :data:`MAX_RECORDS` lines (about 0.6 MB): the newest records keep
the interval, the oldest grow coarser.

Rank 0 also reads every rank's latest record (bounded tail reads) and names a straggler in the
job's log (:mod:`.stragglers`). Nothing here raises into the training loop: a failure stops the
telemetry with one warning.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

from hpcbench.measure.device_use import DeviceUse
from hpcbench.measure.telemetry_files import (
    DIRECTORY,
    MAX_RECORDS,
    WHOLE_BYTES,
    TelemetryRecord,
    latest_records,
    parse_records,
    rank_file,
)
from hpcbench.safe_write import RunSubdir

FORMAT = 1
DEFAULT_INTERVAL_S = 5.0
MAX_PENDING = 4096  # device-timed steps not yet read (a device far behind: the oldest dropped)
#: the fields that are per-step means over a record's interval (merged weighted by steps)
PER_STEP = ("compute_s", "data_s", "comm_s")
#: how long the end of a run waits for rank 0's last straggler scan (a hung filesystem)
SCAN_JOIN_S = 60.0


class StepSums(TypedDict):
    """What a record sums over its interval: steps and samples, and the seconds of compute
    (host-timed steps only), data and comm (``comm_unknown``: a step did not time it)."""

    steps: int
    samples: int
    host_steps: int
    compute: float
    data: float
    comm: float
    comm_unknown: bool


def _empty_sums() -> StepSums:
    return {"steps": 0, "samples": 0, "host_steps": 0, "compute": 0.0, "data": 0.0, "comm": 0.0,
            "comm_unknown": False}  # fmt: skip


def interval_from(text: str | None, default: float = DEFAULT_INTERVAL_S) -> float:
    """Seconds between records from a setting's text: 0 turns telemetry off; a value that is
    not a number from 0.1 to 3600 gives ``default``."""
    try:
        value = float(text or "")
    except ValueError:
        return default
    return value if value == 0 or 0.1 <= value <= 3600 else default


def merge(a: TelemetryRecord, b: TelemetryRecord) -> TelemetryRecord:
    """One record for two neighbours ``a`` then ``b``: ``b``'s position, both intervals."""
    out = dict(b)
    steps = (a.get("steps") or 0) + (b.get("steps") or 0)
    out["steps"] = steps
    out["wall_s"] = round((a.get("wall_s") or 0) + (b.get("wall_s") or 0), 6)
    for key in PER_STEP:
        va, vb = a.get(key), b.get(key)
        if va is None or vb is None or not steps:
            out[key] = vb if va is None else va
        else:
            out[key] = (va * (a.get("steps") or 0) + vb * (b.get("steps") or 0)) / steps
    wa, wb = a.get("wall_s") or 0, b.get("wall_s") or 0
    for key in ("cpu_cores", "gpu_util", "samples_per_s"):
        va, vb = a.get(key), b.get(key)
        if va is not None and vb is not None and wa + wb > 0:
            out[key] = round((va * wa + vb * wb) / (wa + wb), 2)
    for key in ("rss_mb", "gpu_mem_mb"):
        values = [v for v in (a.get(key), b.get(key)) if v is not None]
        out[key] = max(values) if values else None
    return out


class RankFile:
    """One rank's file, written inside ``telemetry/`` held open without following a link
    (:class:`hpcbench.safe_write.RunSubdir`): a planted link, another user's file or a
    directory that is a link is refused (:class:`~hpcbench.safe_write.UnsafePath`)."""

    def __init__(self, run_dir: str | Path, rank: int) -> None:
        self.name = rank_file(run_dir, rank).name
        self._dir = RunSubdir(run_dir, DIRECTORY)
        try:
            self._fh = self._dir.open_append(self.name)
        except BaseException:
            self._dir.close()
            raise

    def lines(self) -> int:
        """The lines it holds (a resumed run goes on counting them)."""
        return self.read_whole().count(b"\n")

    def append(self, line: bytes) -> None:
        """One more line; a line a killed run left unended is ended first."""
        fd = self._fh.fileno()
        size = os.fstat(fd).st_size
        lead = b"" if size == 0 or os.pread(fd, 1, size - 1) == b"\n" else b"\n"
        self._fh.write(lead + line)
        self._fh.flush()

    def read_whole(self) -> bytes:
        fd, data = self._fh.fileno(), b""
        while len(data) <= WHOLE_BYTES:
            chunk = os.pread(fd, 1 << 20, len(data))
            if not chunk:
                return data
            data += chunk
        raise ValueError(f"{self._dir.path / self.name}: larger than {WHOLE_BYTES:,} bytes")

    def replace(self, data: bytes) -> None:
        """Its content replaced (a private temporary file, then a rename), and reopened."""
        self._dir.write_atomically(self.name, data)
        self._fh.close()
        self._fh = self._dir.open_append(self.name)

    def close(self) -> None:
        self._fh.close()
        self._dir.close()


class Telemetry:
    """One rank's telemetry writer. ``total_steps``: the run's steps when known (progress and
    ETA); ``cuda_index``: the GPU this rank computes on; ``log``: where rank 0 names stragglers
    (None: standard error)."""

    def __init__(
        self,
        run_dir: str | Path,
        *,
        rank: int,
        world_size: int,
        host: str,
        interval: float = DEFAULT_INTERVAL_S,
        total_steps: int | None = None,
        total_epochs: int | None = None,
        cuda_index: int | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.path = rank_file(run_dir, rank)
        self.run_dir = Path(run_dir)
        self.rank, self.world, self.host = rank, world_size, host
        self.interval = interval
        self.total_steps, self.total_epochs = total_steps, total_epochs
        self.log = log
        self.next_at = time.monotonic() + interval
        self.records = 0
        self.step = self.samples = 0
        self.epoch: int | None = None
        self._loss: Any = None
        self._unmarked: tuple[str, ...] = ()  # the parts the program does not mark
        self._sums = _empty_sums()  # since the last record
        self._pending: deque[tuple[Any, Any]] = deque(maxlen=MAX_PENDING)  # device events
        self._since = time.monotonic()
        self._use = DeviceUse(cuda_index)
        self._watch: Any = None
        self.scan_stragglers = True
        self._scan: threading.Thread | None = None
        self._file: RankFile | None = None  # opened at the first record
        self.broken = False
        if rank == 0 and world_size > 1:
            from hpcbench.measure.stragglers import StragglerWatch

            self._watch = StragglerWatch()

    def add(
        self,
        steps: int,
        samples: int,
        compute_s: float | tuple[Any, Any],
        data_s: float = 0.0,
        comm_s: float | None = 0.0,
        loss: Any = None,
        epoch: int | None = None,
        not_measured: tuple[str, ...] = (),
    ) -> None:
        """Count ``steps`` more steps (the step position, samples and per-step times); write a
        record when one is due. ``loss`` may be a tensor: it is read once per record.
        ``compute_s`` may be a (start, end) pair of CUDA events of one step: read when the
        device has passed both (``query``), never waited for. ``comm_s`` None: not known now
        (a GPU's, read later): the record's ``comm_s`` is then null. ``not_measured``: the
        parts (``data``, ``comm``) the program does not mark: null, and named in the record."""
        self._unmarked = tuple(not_measured)
        sums = self._sums
        sums["steps"] += steps
        sums["samples"] += samples
        if isinstance(compute_s, tuple):
            self._pending.append(compute_s)
        else:
            sums["host_steps"] += steps
            sums["compute"] += compute_s
        sums["data"] += data_s
        if comm_s is None:
            sums["comm_unknown"] = True
        else:
            sums["comm"] += comm_s
        self.step += steps
        self.samples += samples
        if loss is not None:
            self._loss = loss
        if epoch is not None:
            self.epoch = epoch
        if time.monotonic() >= self.next_at:
            self.flush()

    def flush(self) -> None:
        """Write the record of the interval now ending (none when no step was made)."""
        if self.broken:
            return
        now = time.monotonic()
        self.next_at = now + self.interval
        if not self._sums["steps"]:
            return
        try:
            record = self._record(now, self._sums)
            self._sums = _empty_sums()
            self._since = now
            self._append(record)
            if self._watch is not None and self.scan_stragglers:
                self._name_stragglers()
        except Exception as err:
            self._fail(err)

    def use_gpu(self, cuda_index: int) -> None:
        """Read this GPU's utilisation and memory from now on (a program that chose its device
        after the telemetry started)."""
        self._use = DeviceUse(cuda_index)

    def _device_compute(self) -> float | None:
        """Seconds per step of the device-timed steps whose events have completed (the rest
        wait for the next record); None when none are."""
        done, seconds = 0, 0.0
        while self._pending and self._pending[0][1].query():
            start, end = self._pending.popleft()
            done, seconds = done + 1, seconds + start.elapsed_time(end) / 1000
        return seconds / done if done else None

    def _record(self, now: float, sums: StepSums) -> TelemetryRecord:
        steps, wall = sums["steps"], now - self._since
        if self._pending:
            compute = self._device_compute()
        else:
            host = sums["host_steps"]
            compute = max(0.0, sums["compute"]) / host if host else None
        loss = self._loss
        if loss is not None and hasattr(loss, "item"):
            loss = loss.item()  # one host read per record
        return {
            "v": FORMAT,
            "rank": self.rank,
            "host": self.host,
            "world": self.world,
            "t": round(time.time(), 3),
            "epoch": self.epoch,
            "step": self.step,
            "of": self.total_steps,
            "epochs": self.total_epochs,
            "samples": self.samples,
            "steps": steps,
            "wall_s": round(wall, 6),
            "samples_per_s": sums["samples"] / wall if wall > 0 else None,
            "compute_s": compute,
            "data_s": None if "data" in self._unmarked else sums["data"] / steps,
            "comm_s": None
            if sums["comm_unknown"] or "comm" in self._unmarked
            else sums["comm"] / steps,
            "loss": None if loss is None or not math.isfinite(float(loss)) else float(loss),
            **self._use.read(),
            **({"not_measured": list(self._unmarked)} if self._unmarked else {}),
        }

    def _append(self, record: TelemetryRecord) -> None:
        """One more line (the directory made at the first: a run that fails in its set-up leaves
        none; a resumed run goes on in the same file, counting its lines)."""
        if self._file is None:
            self._file = RankFile(self.run_dir, self.rank)
            self.records = self._file.lines()
        if self.records >= MAX_RECORDS:
            self._compact()
        self._file.append(json.dumps(record, separators=(",", ":")).encode() + b"\n")
        self.records += 1

    def _read_whole(self) -> list[TelemetryRecord]:
        assert self._file is not None
        return parse_records(self._file.read_whole().decode("utf-8", "replace"), self.rank)[0]

    def _compact(self) -> None:
        """Merge each pair of neighbours in the older half (a private temporary file, then a
        rename): the newest records keep the interval's resolution, the oldest grow coarser. A
        file that cannot be read whole is left as it is (the error stops the telemetry)."""
        assert self._file is not None
        old = self._read_whole()[-(MAX_RECORDS + 1) :]
        if len(old) < self.records // 2:
            raise OSError(f"{self.path}: {len(old)} records read of {self.records}: not rewritten")
        half = len(old) // 2
        merged = [merge(old[i], old[i + 1]) for i in range(0, half - 1, 2)]
        if half % 2:
            merged.append(old[half - 1])
        merged += old[half:]
        self._file.replace(
            "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in merged).encode()
        )
        self.records = len(merged)

    def _name_stragglers(self) -> None:
        """Rank 0 reads every rank's latest record and names a straggler, in a thread of its
        own (one at a time: a scan still reading a slow shared filesystem is not doubled), so
        that the training loop never waits for it."""
        if self._scan is not None and self._scan.is_alive():
            return
        self._scan = threading.Thread(target=self._scan_once, name="hpcbench-stragglers",
                                      daemon=True)  # fmt: skip
        self._scan.start()

    def _scan_once(self) -> None:
        try:
            for line in self._watch.update(latest_records(self.run_dir)):
                message = f"hpcbench: {line}"
                if self.log is not None:
                    self.log(message)
                else:
                    print(message, file=sys.stderr, flush=True)
        except Exception:  # the next record scans again
            pass

    def close(self, final: bool = True) -> None:
        """The last record (the steps since the previous one; none when not ``final``: a run
        that failed), then the end: rank 0's straggler scan joined, the file closed."""
        self.scan_stragglers = False  # the run's end starts no scan
        if final:
            self.flush()
        scan, self._scan = self._scan, None
        if scan is not None:
            scan.join(SCAN_JOIN_S)
        self._close_file()

    def _close_file(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            try:
                file.close()
            except OSError:
                pass

    def _fail(self, err: BaseException) -> None:
        self.broken = True
        self._close_file()
        try:
            warnings.warn(f"hpcbench telemetry stopped: {err}", RuntimeWarning, stacklevel=3)
        except Exception:
            pass
