"""The measurements this process started and has not ended (:data:`RUNNING`), stopped at the
interpreter's exit: a program that never calls ``finish()`` (or whose Lightning fit never reached
its teardown) must not leave the energy sampler or rank 0's straggler scan running while the
interpreter, torch and gloo tear down (a thread still inside a library then can end the process
with ``terminate called without an active exception``)."""

from __future__ import annotations

import atexit
import contextlib
from typing import Any

#: the measurements started and not yet ended (each removes itself when it ends)
RUNNING: set[Any] = set()


@atexit.register
def stop_at_exit() -> None:
    """Every measurement still running abandoned (nothing written: it never finished), its
    threads joined. Exit functions run last registered first: this one runs after those the
    program registered once it imported :mod:`hpcbench.measure`, before the teardown."""
    for m in list(RUNNING):
        with contextlib.suppress(Exception):
            m.abandon()
