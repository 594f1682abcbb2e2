"""The local scheduler's state directory: one record per job (created exclusively, so an id is
handed out once), its exit file, its cancel and start marks, and the id counter."""

from __future__ import annotations

import fcntl
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hpcbench.atomic import write_atomically
from hpcbench.jobs.schedulers.base import SchedulerError
from hpcbench.jobs.state import MAX_RECORD_BYTES
from hpcbench.jsonfile import JsonFileError, read_json

ID_PREFIX = "local-"  # local ids never collide with a cluster's numeric ones in the same runs/
_JOB_FILE = re.compile(r"local-([0-9]{1,18})(?:_[0-9]{1,10})?\.(?:json|exit|cancelled|started)")
#: seconds between SIGTERM and SIGKILL on cancel (as scancel's KillWait), then to see them gone
CANCEL_GRACE = 5.0
_COUNTER = re.compile(r"[0-9]{1,17}")  # the id counter; one digit short of an id's 18


def path_exists(path: Path) -> bool:
    """Whether ``path`` exists; a path that cannot even be looked up (too long) does not."""
    try:
        return path.exists()
    except OSError:
        return False


def create_exclusively(path: Path, text: str = "") -> None:
    """Create ``path`` that must not exist yet (mode 0o666 less the umask) holding ``text``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


class JobFiles:
    """Where the local scheduler keeps each job's files, and reading them."""

    root: Path

    # ------------------------------------------------------------------------------- files

    def _record(self, job_id: str) -> Path:
        return self.root / f"{job_id}.json"

    def _exit_file(self, job_id: str) -> Path:
        return self.root / f"{job_id}.exit"

    def _cancel_mark(self, job_id: str) -> Path:
        return self.root / f"{job_id}.cancelled"

    def _started_mark(self, job_id: str) -> Path:
        return self.root / f"{job_id}.started"

    def _job_files(self, job_id: str) -> tuple[Path, ...]:
        return self._record(job_id), self._exit_file(job_id), self._cancel_mark(job_id)

    def _ensure_root(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise SchedulerError(
                f"local scheduler: cannot use {self.root} as its state directory "
                f"({err.strerror}); set HPCBENCH_STATE_DIR to a writable directory"
            ) from None

    def _highest_id(self) -> int:
        """The highest number in the counter or among the job files (a damaged counter is
        recovered from the files)."""
        try:
            text = (self.root / "last_id").read_text().strip()
        except (OSError, ValueError):
            text = ""
        last = int(text) if _COUNTER.fullmatch(text) else 0
        for name in os.listdir(self.root):
            if m := _JOB_FILE.fullmatch(name):
                last = max(last, int(m.group(1)))
        return last

    def _reserve(self, taken: Callable[[str], bool]) -> str:
        """A fresh id: its record created exclusively, skipping ids whose files exist."""
        self._ensure_root()
        try:
            with open(self.root / ".lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                number = self._highest_id()
                while True:
                    number += 1
                    if number >= 10**18:
                        raise SchedulerError(
                            f"local scheduler: job ids in {self.root} are used up to "
                            f"{ID_PREFIX}{number - 1}; remove the job files there you no "
                            "longer need, or set HPCBENCH_STATE_DIR to a new directory"
                        )
                    job_id = f"{ID_PREFIX}{number}"
                    if taken(job_id) or any(p.exists() for p in self._job_files(job_id)):
                        continue
                    try:
                        create_exclusively(self._record(job_id), '{"pid": null}\n')
                    except FileExistsError:
                        continue
                    write_atomically(self.root / "last_id", f"{number}\n", 0o666)
                    return job_id
        except OSError as err:
            raise SchedulerError(
                f"local scheduler: cannot write in {self.root} ({err.strerror})"
            ) from None

    def _load(self, job_id: str) -> dict[str, Any] | None:
        """The job's record, None when there is none; a damaged one is an error."""
        path = self._record(job_id)
        try:
            data = read_json(path, max_bytes=MAX_RECORD_BYTES)
        except JsonFileError as err:
            if err.missing:
                return None
            if err.kind != "invalid":
                raise SchedulerError(f"local job {job_id}: cannot read {path}: {err.why}") from None
            data = None
        if not isinstance(data, dict) or not isinstance(data.get("pid", 0), int | None):
            raise SchedulerError(
                f"local job {job_id}: its record {path} is damaged (not the JSON hpcbench writes)"
            )
        return data

    def _exit_code(self, job_id: str) -> int | None:
        path = self._exit_file(job_id)
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            return None
        except OSError as err:
            raise SchedulerError(
                f"local job {job_id}: cannot read {path}: {err.strerror}"
            ) from None
        try:
            return int(text)
        except ValueError:
            raise SchedulerError(
                f"local job {job_id}: its exit file {path} holds {text[:40]!r}, not an exit status"
            ) from None
