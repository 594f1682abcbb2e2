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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hpcbench.predict import stages
from hpcbench.predict.links import Dispenser, Idle, Inbox, Outbox, WorkSource


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
