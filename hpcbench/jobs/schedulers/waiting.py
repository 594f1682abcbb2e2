"""Waiting for jobs: one ``statuses`` call per poll, backing off from a first interval to a
ceiling, until every job has finished (or a timeout, or a job whose state stays unknown).

Every batch system has this part (the :class:`~.base.Scheduler` base includes it) and needs
nothing of its own for it. It sets ``poll_start`` and ``poll_ceiling`` only where its controller
may be asked more often than a cluster's (the local scheduler: 0.05 s to 1 s), and
``unknown_polls`` where a job may be missing from its answers for longer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import ClassVar

from hpcbench.jobs.schedulers.errors import SchedulerError
from hpcbench.jobs.schedulers.job_status import UNKNOWN, JobRecord, JobStatus
from hpcbench.jobs.schedulers.polling import backoff_intervals, poll_ceiling, sleep_ticking


class Waiting:
    """Polling a batch system until its jobs have finished."""

    #: first poll interval and ceiling in seconds for ``wait`` (clusters: gentle on the
    #: controller, one call every 10 s at most; a job's end is seen within 10 s of it)
    poll_start: ClassVar[float] = 1.0
    poll_ceiling: ClassVar[float] = 10.0
    #: ``wait`` gives up on a job whose state is UNKNOWN this many polls in a row
    unknown_polls: ClassVar[int] = 10

    def poll_intervals(self) -> Iterator[float]:
        """The waits between polls of this scheduler: :func:`backoff_intervals` from
        ``poll_start`` to :func:`poll_ceiling` of its ``poll_ceiling``."""
        ceiling = poll_ceiling(self.poll_ceiling)
        return backoff_intervals(min(self.poll_start, ceiling), ceiling)

    def wait(
        self,
        jobs: Sequence[str | JobRecord],
        timeout: float | None = None,
        on_tick: Callable[[], None] | None = None,
        on_status: Callable[[str, JobStatus], None] | None = None,
    ) -> dict[str, JobStatus]:
        """Poll until every job has finished; one scheduler call per poll, backing off.
        ``on_tick`` is called about once a second meanwhile (to show the job's progress),
        ``on_status`` with each job's status at each poll.

        A job whose state stays UNKNOWN for ``unknown_polls`` polls in a row (the scheduler has
        forgotten it, or its answer cannot be read) ends the wait with a SchedulerError, so that
        a wait without a timeout still ends."""
        pending = {j if isinstance(j, str) else j.job_id for j in jobs}
        final: dict[str, JobStatus] = {}
        unknown: dict[str, int] = {}
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        for delay in self.poll_intervals():
            for job_id, status in self.statuses(sorted(pending)).items():
                if job_id not in pending:
                    continue
                if on_status is not None:
                    on_status(job_id, status)
                if status.finished:
                    final[job_id] = status
                    pending.discard(job_id)
                unknown[job_id] = unknown.get(job_id, 0) + 1 if status.state == UNKNOWN else 0
                if unknown[job_id] >= self.unknown_polls:
                    why = f" ({status.reason})" if status.reason else ""
                    raise SchedulerError(
                        f"job {job_id}: state unknown{why} in {self.unknown_polls} polls in a row "
                        f"over {time.monotonic() - started:.0f} s; stopped waiting "
                        f"(hpcbench status {job_id} asks again)"
                    )
            if not pending:
                return final
            if deadline is not None and time.monotonic() + delay > deadline:
                raise TimeoutError(
                    f"jobs still running after {timeout:.0f} s: {', '.join(sorted(pending))}"
                )
            sleep_ticking(delay, on_tick)
        raise AssertionError("unreachable")
