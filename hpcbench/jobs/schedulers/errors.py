"""What a scheduler's failures are: one line each, quoting what the batch system said."""

from __future__ import annotations


class SchedulerError(RuntimeError):
    """The scheduler refused or failed a request; the message quotes what it said."""


class SchedulerUnreachable(SchedulerError):
    """The batch system's commands are here but its controller does not answer (a laptop with
    the client packages, a login node during maintenance): nothing can be submitted now."""


class JobIdError(SchedulerError):
    """A job id that is not of the form the scheduler hands out (a usage error)."""


class RequestRefused(SchedulerError):
    """The batch system would refuse the request as it stands (a partition's limits, an array
    too large), found by a preflight before anything is queued."""
