"""Where the scheduler commands of the current block run: here (None) or on a login node."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, cast

from hpcbench.jobs.schedulers.commands import COMMAND_HOST

if TYPE_CHECKING:
    from hpcbench.jobs.remote.host import RemoteHost


def current() -> RemoteHost | None:
    """The login node this block's scheduler commands run on (None: this machine)."""
    return cast("RemoteHost | None", COMMAND_HOST.get())


@contextmanager
def using(host: RemoteHost | None) -> Iterator[RemoteHost | None]:
    """Run the block's scheduler commands on ``host`` (on this machine for None)."""
    token = COMMAND_HOST.set(host)
    try:
        yield host
    finally:
        COMMAND_HOST.reset(token)
