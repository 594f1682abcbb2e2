"""The links of the prediction pipeline: credit-based channels between ranks (an
:class:`Outbox` sends only while its consumer has credit, an :class:`Inbox` hands it back
as it takes a unit), the readers' work dispenser, and how a waiting rank sleeps
(:class:`Idle`, :func:`sleepy_barrier`) instead of spinning a core."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import numpy as np

from hpcbench.predict import stages
from hpcbench.predict.config import PredictError

TAG_DATA = 21
TAG_CREDIT = 22
TAG_WORK = 23
_CREDIT = np.ones(1, dtype=np.int64)
MIN_SLEEP_S, MAX_SLEEP_S = 2e-5, 1e-3  # a waiting rank's sleeps back off between these...
LONGEST_SLEEP_S = 0.02  # ...or up to this, when units arrive seldom (see :func:`sleep_cap`)


def sleep_cap(batch: int, items_per_s: float | None) -> float:
    """How long a waiting rank may sleep between polls: a quarter of the time between two units
    at the planned throughput (between 1 and 20 ms). Each wake-up costs CPU that the working
    ranks need when ranks outnumber cores; a unit waiting a quarter of an interval longer is
    covered by the credits' slack."""
    if not items_per_s or items_per_s <= 0:
        return MAX_SLEEP_S
    return min(LONGEST_SLEEP_S, max(MAX_SLEEP_S, batch / items_per_s / 4))


class Idle:
    """Sleep between polls, backing off while nothing happens; stall detection."""

    def __init__(self, stall_timeout: float, who: str, longest: float = MAX_SLEEP_S) -> None:
        self.delay = MIN_SLEEP_S
        self.longest = longest
        self.stall_timeout = stall_timeout
        self.who = who
        self.last = time.monotonic()

    def progressed(self) -> None:
        self.delay = MIN_SLEEP_S
        self.last = time.monotonic()

    def wait(self) -> None:
        time.sleep(self.delay)
        self.delay = min(self.delay * 2, self.longest)
        quiet = time.monotonic() - self.last
        if quiet > self.stall_timeout:
            raise PredictError(
                f"{self.who}: nothing received for {quiet:.0f} s (--stall-timeout); "
                "a peer rank has died or hangs"
            )


def sleepy_barrier(comm: Any) -> None:
    """A barrier that sleeps while it waits (MPI's own spins and steals the cores). No stall
    timeout: ranks legitimately wait here for long (rank 0 listing a large folder, calibrating a
    large model, the last units draining); a rank that dies is the launcher's to report."""
    request = comm.Ibarrier()
    idle = Idle(float("inf"), "barrier")
    while not request.Test():
        idle.wait()


def _words(comm: Any, mpi: Any, tag: int, status: Any) -> Any:
    """(source, value) of each one-word message waiting on ``tag``, received as it is yielded."""
    while comm.Iprobe(mpi.ANY_SOURCE, tag, status):
        source = status.Get_source()
        word = np.empty(1, dtype=np.int64)
        comm.Recv([word, mpi.INT64_T], source, tag)
        yield source, int(word[0])


class Outbox:
    """Sending side of one link: credits per consumer, requests in flight."""

    def __init__(self, comm: Any, consumers: list[int], credits: int, mpi: Any) -> None:
        self.comm, self.mpi = comm, mpi
        self.consumers = consumers
        self.credits = {c: credits for c in consumers}
        self.granted = credits
        self.sent = {c: 0 for c in consumers}
        self.back = {c: 0 for c in consumers}
        self.in_flight: list[tuple[Any, np.ndarray]] = []
        self._next = 0
        self._status = mpi.Status()

    def poll(self) -> bool:
        got = False
        for source, count in _words(self.comm, self.mpi, TAG_CREDIT, self._status):
            self.credits[source] += count
            self.back[source] += count
            got = True
        if self.in_flight:
            self.in_flight = [(r, b) for r, b in self.in_flight if not r.Test()]
        return got

    def ready(self) -> bool:
        return any(v > 0 for v in self.credits.values())

    def held(self) -> int:
        return sum(self.sent[c] - self.back[c] for c in self.consumers)

    def send(self, buf: np.ndarray) -> None:
        """To the consumer with the most credits back (ties: the next in turn)."""
        n = len(self.consumers)
        order = [self.consumers[(self._next + k) % n] for k in range(n)]
        target = max(order, key=lambda c: self.credits[c])
        assert self.credits[target] > 0
        self._next = (self.consumers.index(target) + 1) % n
        self.credits[target] -= 1
        self.sent[target] += 1
        self.in_flight.append((self.comm.Isend([buf, self.mpi.BYTE], target, TAG_DATA), buf))

    def finish(self, idle: Idle) -> None:
        """End markers to every consumer, then wait until each unit sent has been taken."""
        marker = stages.end_marker()
        for c in self.consumers:
            self.in_flight.append((self.comm.Isend([marker, self.mpi.BYTE], c, TAG_DATA), marker))
        while self.in_flight or any(self.back[c] < self.sent[c] for c in self.consumers):
            if self.poll():
                idle.progressed()
            else:
                idle.wait()


class Inbox:
    """Receiving side: units queued as they arrive, producers still open.

    A matched message is received with ``Irecv`` and completed by later polls: a large unit over
    a transport that needs the sender's help (TCP, shared memory without single-copy) never holds
    this rank inside a blocking receive while its producer computes."""

    def __init__(self, comm: Any, producers: list[int], credits: int, mpi: Any) -> None:
        self.comm, self.mpi = comm, mpi
        self.open = set(producers)
        self.queue: deque[tuple[int, stages.Unit]] = deque()
        self.receiving: list[tuple[int, np.ndarray, Any]] = []
        self.credit_requests: list[Any] = []
        self._status = mpi.Status()

    def poll(self) -> bool:
        got = False
        while True:
            message = self.comm.Improbe(self.mpi.ANY_SOURCE, TAG_DATA, self._status)
            if message is None:
                break
            source = self._status.Get_source()
            buf = np.empty(self._status.Get_count(self.mpi.BYTE), dtype=np.uint8)
            self.receiving.append((source, buf, message.Irecv([buf, self.mpi.BYTE])))
            got = True
        still = []
        for source, buf, request in self.receiving:  # in arrival order
            if not request.Test():
                still.append((source, buf, request))
                continue
            unit = stages.unpack(buf)
            if unit.kind == stages.END:  # after this producer's data (MPI keeps their order)
                self.open.discard(source)
            else:
                self.queue.append((source, unit))
            got = True
        self.receiving = still
        if self.credit_requests:
            self.credit_requests = [r for r in self.credit_requests if not r.Test()]
        return got

    def take(self) -> stages.Unit:
        """The oldest unit; its producer gets the credit back."""
        source, unit = self.queue.popleft()
        self.credit_requests.append(
            self.comm.Isend([_CREDIT, self.mpi.INT64_T], source, TAG_CREDIT)
        )
        return unit

    @property
    def done(self) -> bool:
        return not self.open and not self.queue and not self.receiving

    def drain(self, idle: Idle) -> None:
        while self.credit_requests:
            self.credit_requests = [r for r in self.credit_requests if not r.Test()]
            if self.credit_requests:
                idle.wait()


class Dispenser:
    """The sink's side of dealing units to readers: each request gets the next unit number, or
    -1 once every unit has been handed out."""

    def __init__(self, comm: Any, mpi: Any, units: int) -> None:
        self.comm, self.mpi = comm, mpi
        self.units = units
        self.next = 0
        self.replies: list[tuple[Any, np.ndarray]] = []
        self._status = mpi.Status()

    def poll(self) -> bool:
        got = False
        for source, _ in _words(self.comm, self.mpi, TAG_WORK, self._status):
            reply = np.array([self.next if self.next < self.units else -1], dtype=np.int64)
            self.next = min(self.next + 1, self.units)
            self.replies.append(
                (self.comm.Isend([reply, self.mpi.INT64_T], source, TAG_WORK), reply)
            )
            got = True
        if self.replies:
            self.replies = [(r, b) for r, b in self.replies if not r.Test()]
        return got


class WorkSource:
    """A reader's side: unit numbers asked of the dispenser, ``PREFETCH`` requests ahead (the
    answers arrive while the reader works, whatever the sink's sleeps)."""

    PREFETCH = 2

    def __init__(self, comm: Any, mpi: Any, dispenser: int) -> None:
        self.comm, self.mpi, self.dispenser = comm, mpi, dispenser
        self.ready: deque[int] = deque()
        self.asked = 0
        self.exhausted = False
        self.requests: list[tuple[Any, np.ndarray]] = []
        self._status = mpi.Status()
        for _ in range(self.PREFETCH):
            self._ask()

    def _ask(self) -> None:
        word = np.ones(1, dtype=np.int64)
        self.requests.append(
            (self.comm.Isend([word, self.mpi.INT64_T], self.dispenser, TAG_WORK), word)
        )
        self.asked += 1

    def _poll(self) -> bool:
        got = False
        while self.asked and self.comm.Iprobe(self.dispenser, TAG_WORK, self._status):
            reply = np.empty(1, dtype=np.int64)
            self.comm.Recv([reply, self.mpi.INT64_T], self.dispenser, TAG_WORK)
            self.asked -= 1
            if reply[0] < 0:
                self.exhausted = True
            else:
                self.ready.append(int(reply[0]))
            got = True
        self.requests = [(r, b) for r, b in self.requests if not r.Test()]
        return got

    def take(self, idle: Idle) -> int | None:
        """The next unit number to read (None: all dealt, every answer received)."""
        while True:
            if self._poll():
                idle.progressed()
            if self.ready:
                if not self.exhausted:
                    self._ask()
                return self.ready.popleft()
            if self.exhausted and not self.asked:
                while self.requests:
                    self._poll()
                    if self.requests:
                        idle.wait()
                return None
            idle.wait()
