"""Every rank's record gathered to rank 0 at the end of a measurement: through the program's own
communicator where it has one (mpi4py's COMM_WORLD, else torch.distributed's default group,
when initialised and not yet destroyed), else through files in the run directory, which every
rank of a job shares (``.measure/rank-N.json``, written by temporary name and rename; rank 0
waits for them a bounded time, names the ranks that never wrote, and removes the files)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from hpcbench.atomic import write_json_atomically
from hpcbench.files import NotRegularFile, read_regular
from hpcbench.launch import LaunchInfo

EXCHANGE_DIR = ".measure"
MAX_RECORD_BYTES = 64 << 20
POLL_S = 0.1


def gather(
    record: dict[str, Any], launch: LaunchInfo, run_dir: Path, timeout: float
) -> list[dict[str, Any]] | None:
    """The records of every rank in rank order on rank 0 (a rank that never sent one is left
    out, its absence recorded in rank 0's warnings); None on the other ranks."""
    if launch.world_size == 1:
        return [record]
    used, found = _by_communicator(record, launch)
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
    record: dict[str, Any], launch: LaunchInfo
) -> tuple[bool, list[dict[str, Any]] | None]:
    """Through mpi4py or torch.distributed when the program initialised one of the launch's
    size (never started here): (whether one was used, the records on rank 0)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        if mpi.COMM_WORLD.Get_size() == launch.world_size:
            gathered = mpi.COMM_WORLD.gather(record, root=0)
            return True, gathered if launch.rank == 0 else None
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        if dist.get_world_size() == launch.world_size:
            out: list[Any] | None = [None] * launch.world_size if launch.rank == 0 else None
            dist.gather_object(record, out, dst=0)
            return True, [r for r in out or [] if r is not None] if launch.rank == 0 else None
    return False, None


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
                if got is not None and got.get("rank") == rank:
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


def _read(path: Path) -> dict[str, Any] | None:
    """A rank's record, or None while it is not there (a link or a device is never read)."""
    try:
        data = json.loads(read_regular(path, MAX_RECORD_BYTES))
    except (FileNotFoundError, NotRegularFile, ValueError, OSError):
        return None
    return data if isinstance(data, dict) else None
