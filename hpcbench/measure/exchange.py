"""Every rank's record gathered to rank 0 at the end of a measurement, within a bounded time.

Through the program's own communicator where it has one and every rank arrives in time:
mpi4py's COMM_WORLD (a non-blocking barrier waited on for at most ``timeout``), or
torch.distributed's default group when its backend is gloo (``monitored_barrier``; a NCCL group
is never used: its objects travel through the GPU). Else, or when a rank did not arrive,
through files in the run directory, which every rank of a job shares (``.measure/rank-N.json``).

A run directory may be writable by others, so the files are this run's only:

- ``.measure/`` is this user's directory (mode 0700), never a link, and every file in it is
  opened without following a link, written through a private temporary file and a rename
  (:mod:`hpcbench.safe_write`);
- rank 0 makes a random token at the start of a run of several ranks (``.measure/token``,
  readable by this user only); each other rank writes it into its record, and rank 0 takes a
  record only with that token (another's, or an earlier run's, is ignored with a warning naming
  the file) and only when it began within :data:`SAME_RUN_S` of rank 0's own start;
- rank 0 waits a bounded time, names the ranks that never wrote, and removes what it took and
  the token.
"""

from __future__ import annotations

import datetime
import hmac
import json
import os
import secrets
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcbench.safe_write import RunSubdir
from hpcbench.this_rank import LaunchInfo

if TYPE_CHECKING:
    from hpcbench.measure.rank_records import RankRecord

EXCHANGE_DIR = ".measure"
TOKEN_FILE = "token"
MAX_RECORD_BYTES = 64 << 20
POLL_S = 0.1
#: a record that began this much before rank 0's is an earlier run's (ranks start together)
SAME_RUN_S = 300.0


def gather(
    record: RankRecord, launch: LaunchInfo, run_dir: Path, timeout: float
) -> list[RankRecord] | None:
    """The records of every rank in rank order on rank 0 (a rank that never sent one is left
    out, its absence recorded in rank 0's warnings); None on the other ranks."""
    if launch.world_size == 1:
        return [record]
    used, found = _by_communicator(record, launch, timeout)
    if not used:
        found = _by_files(record, launch, run_dir, timeout)
    elif launch.rank == 0:
        drop_token(run_dir)
    if found is None:
        return None
    for each in found:
        each.pop("token", None)  # never in the documents
    got = {r["rank"] for r in found}
    missing = [r for r in range(launch.world_size) if r not in got]
    if missing:
        record["warnings"].append(
            f"finish: no record from rank(s) {', '.join(map(str, missing))} within "
            f"{timeout:g} s: left out"
        )
    return sorted(found, key=lambda r: r["rank"])


def _by_communicator(
    record: RankRecord, launch: LaunchInfo, timeout: float
) -> tuple[bool, list[RankRecord] | None]:
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


def make_token(run_dir: Path) -> str:
    """Rank 0, at the start: this run's token, written to ``.measure/token`` (this user's)."""
    token = secrets.token_hex(16)
    with RunSubdir(run_dir, EXCHANGE_DIR, mode=0o700) as folder:
        folder.write_atomically(TOKEN_FILE, token.encode(), mode=0o600)
    return token


def drop_token(run_dir: Path) -> None:
    """Rank 0, at the end: the token removed (and ``.measure/`` when nothing else is left)."""
    try:
        with RunSubdir(run_dir, EXCHANGE_DIR, create=False) as folder:
            folder.unlink(TOKEN_FILE)
            folder.remove_if_empty()
    except OSError:
        pass  # not there, or not ours: nothing to remove


def _by_files(
    record: RankRecord, launch: LaunchInfo, run_dir: Path, timeout: float
) -> list[RankRecord] | None:
    deadline = time.monotonic() + timeout
    try:
        folder = RunSubdir(run_dir, EXCHANGE_DIR, mode=0o700)
    except OSError as err:
        record["warnings"].append(f"finish: {err}: no record exchanged through files")
        return None if launch.rank else [record]
    with folder:
        if launch.rank == 0:
            return _collect(folder, record, launch.world_size, deadline)
        token = _run_token(folder, record.get("began_at"), deadline)
        if token is None:
            record["warnings"].append(
                f"finish: no token of this run from rank 0 in {folder.path / TOKEN_FILE} "
                f"within {timeout:g} s: this rank's record is not sent"
            )
            return None
        data = json.dumps({**record, "token": token}).encode()
        folder.write_atomically(f"rank-{launch.rank}.json", data)
        return None


def _collect(
    folder: RunSubdir, record: RankRecord, world: int, deadline: float
) -> list[RankRecord]:
    """Rank 0: the records of this run's ranks (their token, this run's time), until every
    rank's is in or the deadline; the files taken and the token removed."""
    token, found, refused = record.get("token"), {0: record}, set()
    while len(found) < world and time.monotonic() < deadline:
        for rank in range(1, world):
            name = f"rank-{rank}.json"
            got = None if rank in found else _read(folder, name)
            if got is None or got.get("rank") != rank or not _same_run(got, record):
                continue
            theirs = got.get("token")
            if token and isinstance(theirs, str) and hmac.compare_digest(theirs, token):
                found[rank] = got
            elif name not in refused:
                refused.add(name)
                record["warnings"].append(f"finish: {folder.path / name}: not this run's token "
                                          "(not written by this run's ranks): ignored")  # fmt: skip
        if len(found) < world:
            time.sleep(POLL_S)
    for rank in found:
        if rank:
            folder.unlink(f"rank-{rank}.json")
    folder.unlink(TOKEN_FILE)
    folder.remove_if_empty()
    return list(found.values())


def _run_token(folder: RunSubdir, began: Any, deadline: float) -> str | None:
    """This run's token as rank 0 wrote it (waited for until ``deadline``): a token file written
    no earlier than :data:`SAME_RUN_S` before this rank began (not an earlier run's)."""
    while True:
        try:
            made = os.stat(TOKEN_FILE, dir_fd=folder.fd, follow_symlinks=False).st_mtime
            token = folder.read(TOKEN_FILE, 64).decode("ascii").strip()
            fresh = not isinstance(began, (int, float)) or made >= began - SAME_RUN_S
            if fresh and len(token) == 32:
                return token
        except (OSError, ValueError):
            pass  # not written yet
        if time.monotonic() >= deadline:
            return None
        time.sleep(POLL_S)


def _same_run(theirs: RankRecord, mine: RankRecord) -> bool:
    """Whether a rank's record belongs to rank 0's run: it began no more than
    :data:`SAME_RUN_S` before rank 0's."""
    began, ours = theirs.get("began_at"), mine.get("began_at")
    if not isinstance(began, (int, float)) or not isinstance(ours, (int, float)):
        return False
    return began >= ours - SAME_RUN_S


def _read(folder: RunSubdir, name: str) -> RankRecord | None:
    """A rank's record, or None while it is not there (a link, a device, another user's file or
    a hard link is never read)."""
    try:
        found = json.loads(folder.read(name, MAX_RECORD_BYTES))
    except (OSError, ValueError, RecursionError):
        return None
    return found if isinstance(found, dict) else None
