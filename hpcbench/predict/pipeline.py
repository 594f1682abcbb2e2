"""The MPI pipeline: reader ranks -> preprocessor ranks -> predictor ranks -> one sink rank.

Every unit travels as one contiguous uint8 buffer (:func:`hpcbench.predict.stages.pack`), sent
with ``Isend`` and received with a matched probe (``Improbe`` + ``Message.Recv``), never pickled.

**Backpressure by credits.** A consumer grants each of its producers ``credits`` units up front
and hands one back each time it takes a unit off its queue. A producer sends only while it holds a
credit, to the consumer that has handed back the most (the least loaded one: an idle consumer has
all of its credits back, so it gets the next unit). A fast reader therefore cannot flood memory:
a consumer never holds more than the credits it granted, a producer never more than it was granted.

**End of stream.** A producer, after its last unit, sends an end marker to each consumer (after
its data on the same channel, which MPI keeps in order) and then waits until every unit it sent
has been taken (all its credits are back), so no message is left unreceived. A consumer ends when
every producer's marker has come and its queue is empty, and then does the same downstream. The
sink ends last.

**Waiting without spinning.** Ranks may outnumber cores (a sink and a reader that mostly wait
share cores with the workers). MPI's blocking calls spin; every wait here polls and then sleeps,
backing off from 20 µs to a quarter of the planned time between units (1 to 20 ms), so a waiting
rank gives its core away. A rank that hears nothing
for ``--stall-timeout`` seconds ends the run: a peer has died or hangs.

**Dealing.** Readers ask the sink for unit numbers (two requests ahead, so the answers arrive
while they work) and get the next one not yet dealt: a reader that meets large images takes
fewer units, and no reader sits idle at the end while another has a backlog.

Each rank counts its items, its busy seconds, the seconds it waited for input (nothing queued)
and for output credits (work queued, nobody to send it to), and its memory.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
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


@dataclass
class Counters:
    role: str
    items: int = 0
    units: int = 0
    busy_s: float = 0.0
    wait_input_s: float = 0.0
    wait_credit_s: float = 0.0
    max_queue: int = 0  # units queued at once, at most
    max_held: int = 0  # units sent but not yet taken by their consumers, at most
    started: float = field(default_factory=time.perf_counter)
    ended: float = 0.0
    cpu_started: float = field(default_factory=time.process_time)
    cpu_ended: float = 0.0

    def start(self) -> None:
        self.started, self.cpu_started = time.perf_counter(), time.process_time()

    def end(self) -> None:
        self.ended, self.cpu_ended = time.perf_counter(), time.process_time()

    def as_dict(self) -> dict[str, Any]:
        d = {
            k: v
            for k, v in self.__dict__.items()
            if k not in ("started", "ended", "cpu_started", "cpu_ended")
        }
        d["elapsed_s"] = (self.ended or time.perf_counter()) - self.started
        d["cpu_s"] = (
            self.cpu_ended or time.process_time()
        ) - self.cpu_started  # this process's CPU time
        return d


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


def run_reader(
    comm: Any,
    mpi: Any,
    units: list[np.ndarray],
    work: Callable[[int, np.ndarray], stages.Unit],
    consumers: list[int],
    credits: int,
    idle: Idle,
    counters: Counters,
    dispenser: int = 0,
) -> None:
    """Read (and, with no preprocessors, decode) the units the dispenser deals this rank."""
    out = Outbox(comm, consumers, credits, mpi)
    source = WorkSource(comm, mpi, dispenser)
    while True:
        waited = time.perf_counter()
        number = source.take(idle)
        counters.wait_input_s += time.perf_counter() - waited
        if number is None:
            break
        ids = units[number]
        waited = time.perf_counter()
        while not out.ready():
            if out.poll():
                idle.progressed()
            else:
                idle.wait()
        counters.wait_credit_s += time.perf_counter() - waited
        t0 = time.perf_counter()
        unit = work(number, ids)
        buf = stages.pack(unit.kind, unit.number, unit.arrays)
        counters.busy_s += time.perf_counter() - t0
        out.send(buf)
        counters.items += len(ids)
        counters.units += 1
        counters.max_held = max(counters.max_held, out.held())
        out.poll()
        idle.progressed()
    out.finish(idle)
    counters.end()


def run_worker(
    comm: Any,
    mpi: Any,
    producers: list[int],
    credits_in: int,
    work: Callable[[stages.Unit], stages.Unit],
    consumers: list[int],
    credits_out: int,
    idle: Idle,
    counters: Counters,
) -> None:
    """A preprocessor or predictor: take a unit when there is one and a credit to pass it on."""
    inbox = Inbox(comm, producers, credits_in, mpi)
    out = Outbox(comm, consumers, credits_out, mpi)
    while not inbox.done:
        t0 = time.perf_counter()
        moved = inbox.poll() | out.poll()
        counters.max_queue = max(counters.max_queue, len(inbox.queue))
        if inbox.queue and out.ready():
            unit = inbox.take()
            t1 = time.perf_counter()
            result = work(unit)
            buf = stages.pack(result.kind, result.number, result.arrays)
            del unit  # its buffer can go before the next one arrives
            counters.busy_s += time.perf_counter() - t1
            out.send(buf)
            counters.items += len(result.ids)
            counters.units += 1
            counters.max_held = max(counters.max_held, out.held())
            idle.progressed()
            continue
        if moved:
            idle.progressed()
            continue
        idle.wait()
        waited = time.perf_counter() - t0
        if inbox.queue:
            counters.wait_credit_s += waited
        else:
            counters.wait_input_s += waited
    inbox.drain(idle)
    out.finish(idle)
    counters.end()


def run_sink(
    comm: Any,
    mpi: Any,
    producers: list[int],
    credits_in: int,
    collect: Callable[[stages.Unit], None],
    idle: Idle,
    counters: Counters,
    dispenser: Dispenser | None = None,
) -> None:
    """Collect every result; deal the units to the readers as they ask (``dispenser``)."""
    inbox = Inbox(comm, producers, credits_in, mpi)
    while not inbox.done:
        t0 = time.perf_counter()
        if dispenser is not None and dispenser.poll():
            idle.progressed()
        if inbox.poll():
            counters.max_queue = max(counters.max_queue, len(inbox.queue))
            idle.progressed()
        while inbox.queue:
            unit = inbox.take()
            t1 = time.perf_counter()
            collect(unit)
            counters.busy_s += time.perf_counter() - t1
            counters.items += len(unit.ids)
            counters.units += 1
        if not inbox.done and not inbox.queue:
            idle.wait()
            counters.wait_input_s += time.perf_counter() - t0
    inbox.drain(idle)
    while dispenser is not None and dispenser.replies:  # every reply sent before MPI ends
        dispenser.poll()
        if dispenser.replies:
            idle.wait()
    counters.end()
