"""Every rank's record gathered to rank 0 at the end of a measurement, within a bounded time.

Through the program's own communicator where it has one and every rank arrives in time:
mpi4py's COMM_WORLD (a non-blocking barrier waited on for at most ``timeout``), or
torch.distributed's default group when its backend is gloo (``monitored_barrier``; a NCCL group
is never used: its objects travel through the GPU). Else, or when a rank did not arrive,
through files in the run directory, which every rank of a job shares (``.measure/rank-N.json``,
written by temporary name and rename; regular files only, never through a link): rank 0 takes
a file only when its record began within :data:`SAME_RUN_S` of rank 0's own start (an earlier
run's leftover is not this run's), waits a bounded time, names the ranks that never wrote, and
removes what it took."""

from __future__ import annotations

import datetime
import json
import sys
import time
from pathlib import Path
from typing import Any

from hpcbench.atomic import write_json_atomically
from hpcbench.files import NotRegularFile, open_regular
from hpcbench.launch import LaunchInfo

EXCHANGE_DIR = ".measure"
MAX_RECORD_BYTES = 64 << 20
POLL_S = 0.1
#: a record that began this much before rank 0's is an earlier run's (ranks start together)
SAME_RUN_S = 300.0


def gather(
    record: dict[str, Any], launch: LaunchInfo, run_dir: Path, timeout: float
) -> list[dict[str, Any]] | None:
    """The records of every rank in rank order on rank 0 (a rank that never sent one is left
    out, its absence recorded in rank 0's warnings); None on the other ranks."""
    if launch.world_size == 1:
        return [record]
    used, found = _by_communicator(record, launch, timeout)
    if not used:
        found = _by_files(record, launch, run_dir, timeout)
    if found is None:
        return None
    got = {r["rank"] for r in found}
    missing = [r for r in range(launch.world_size) if r not in got]
    if missing:
        record["warnings"].append(
            f"finish: no record from rank(s) {', '.join(map(str, missing))} within "
            f"{timeout:g} s: left out"
        )
    return sorted(found, key=lambda r: r["rank"])


def _by_communicator(
    record: dict[str, Any], launch: LaunchInfo, timeout: float
) -> tuple[bool, list[dict[str, Any]] | None]:
    """Through mpi4py or a gloo group when the program initialised one of the launch's size
    (never started here) and every rank arrived within ``timeout``: (whether one was used,
    the records on rank 0)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        world = mpi.COMM_WORLD
        if world.Get_size() == launch.world_size and _all_arrived(world.Ibarrier(), timeout):
            gathered = world.gather(record, root=0)
            return True, gathered if launch.rank == 0 else None
        return False, None
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        if dist.get_world_size() == launch.world_size and dist.get_backend() == "gloo":
            try:
                dist.monitored_barrier(timeout=datetime.timedelta(seconds=timeout))
            except RuntimeError:
                return False, None  # a rank did not arrive: each writes its file instead
            out: list[Any] | None = [None] * launch.world_size if launch.rank == 0 else None
            dist.gather_object(record, out, dst=0)
            return True, [r for r in out or [] if r is not None] if launch.rank == 0 else None
    return False, None


def _all_arrived(request: Any, timeout: float) -> bool:
    """Whether a non-blocking barrier completed within ``timeout`` (it stays pending if not)."""
    deadline = time.monotonic() + timeout
    while not request.Test():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _by_files(
    record: dict[str, Any], launch: LaunchInfo, run_dir: Path, timeout: float
) -> list[dict[str, Any]] | None:
    folder = run_dir / EXCHANGE_DIR
    folder.mkdir(parents=True, exist_ok=True)
    if launch.rank != 0:
        write_json_atomically(folder / f"rank-{launch.rank}.json", record)
        return None
    found = {0: record}
    deadline = time.monotonic() + timeout
    while len(found) < launch.world_size and time.monotonic() < deadline:
        for rank in range(1, launch.world_size):
            if rank not in found:
                got = _read(folder / f"rank-{rank}.json")
                if got is not None and got.get("rank") == rank and _same_run(got, record):
                    found[rank] = got
        if len(found) < launch.world_size:
            time.sleep(POLL_S)
    for rank in found:
        (folder / f"rank-{rank}.json").unlink(missing_ok=True)
    try:
        folder.rmdir()
    except OSError:
        pass  # something else is there: not ours to remove
    return list(found.values())


def _same_run(theirs: dict[str, Any], mine: dict[str, Any]) -> bool:
    """Whether a rank's record belongs to rank 0's run: it began no more than
    :data:`SAME_RUN_S` before rank 0's."""
    began, ours = theirs.get("began_at"), mine.get("began_at")
    if not isinstance(began, (int, float)) or not isinstance(ours, (int, float)):
        return False
    return began >= ours - SAME_RUN_S


def _read(path: Path) -> dict[str, Any] | None:
    """A rank's record, or None while it is not there (a link or a device is never read)."""
    try:
        with open(open_regular(path, follow_symlinks=False), "rb") as fh:
            data = fh.read(MAX_RECORD_BYTES + 1)
        if len(data) > MAX_RECORD_BYTES:
            return None
        found = json.loads(data)
    except (FileNotFoundError, NotRegularFile, ValueError, OSError):
        return None
    return found if isinstance(found, dict) else None
