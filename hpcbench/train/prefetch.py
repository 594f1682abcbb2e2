"""Reading the next batches while the current one computes (``--prefetch N``).

A :class:`Prefetcher` runs the rank's batch iterator in one background thread, up to ``N``
batches ahead, each handed to ``stage`` there (:meth:`hpcbench.train.normalize.Normalizer.stage`: on
a GPU it copies the batch into pinned memory and starts a non-blocking copy to the device on a
side stream, so the transfer overlaps the compute too). The training loop takes batches in the
same order as without it: the data order, and so the results, do not change.

The reader's I/O (``preadv``) and numpy's copies release the interpreter lock, so the thread
reads while the main thread computes. On a CPU whose cores already run one compute thread each
the reading competes with the compute, which is why ``auto`` reads ahead only on GPUs.

An exception in the thread (an unreadable shard) is raised by the ``next`` that would have
returned that batch; :meth:`Prefetcher.close` stops the thread (at the end of the epoch, or when
a stop signal or an error ends it early).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

_END = object()


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class Prefetcher:
    """``stage(*item)`` of every item of ``items``, computed up to ``depth`` items ahead."""

    def __init__(self, items: Iterator[Any], stage: Callable[..., Any], depth: int) -> None:
        self._items, self._stage = items, stage
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._fill, name="hpcbench-prefetch", daemon=True)
        self._thread.start()

    def _put(self, value: Any) -> bool:
        while not self._closed.is_set():
            try:
                self._queue.put(value, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _fill(self) -> None:
        try:
            for item in self._items:
                if not self._put(self._stage(*item)):
                    return
            self._put(_END)
        except BaseException as error:  # noqa: BLE001 - handed to the consumer
            self._put(_Failed(error))

    def __iter__(self) -> Prefetcher:
        return self

    def __next__(self) -> Any:
        value = self._queue.get()
        if value is _END:
            self._queue.put(_END)  # a later next() ends too
            raise StopIteration
        if isinstance(value, _Failed):
            raise value.error
        return value

    def close(self) -> None:
        """Stop the thread and drop what it read ahead."""
        self._closed.set()
        while self._thread.is_alive():
            try:
                self._queue.get(timeout=0.05)
            except queue.Empty:
                pass
            self._thread.join(timeout=0.05)


def staged(items: Iterator[Any], stage: Callable[..., Any]) -> Iterator[Any]:
    """The same as a :class:`Prefetcher` of depth 0: each item staged when it is asked for."""
    for item in items:
        yield stage(*item)


def prefetch_depth(option: int | None, device_type: str) -> int:
    """Batches read ahead: ``--prefetch`` (``option``), else 2 on a GPU and none on a CPU (whose
    cores already run the compute threads)."""
    if option is not None:
        return option
    return 2 if device_type == "cuda" else 0
