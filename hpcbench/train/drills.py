"""Failure drills: ``HPCBENCH_FAIL_AT=RANK:STEP[:MODE]`` makes one rank misbehave at one global
training step (``A:S:MODE,B:T:MODE`` one drill for each of two ranks) (counted from 0 over all epochs), to rehearse what a cluster does to long jobs.

Modes: ``raise`` (default: an exception, the job fails naming the rank), ``kill`` (the rank sends
itself SIGKILL: no Python clean-up at all, as when the kernel's OOM killer strikes), ``hang`` (the
rank stops making progress; the hang watchdog, ``--hang-timeout``, ends the job), ``stop`` (the rank
sends itself SIGUSR2, as the scheduler does before a time limit: the run checkpoints and stops for
requeue), ``disk-full`` (rank 0's checkpoint write at that step fails with ENOSPC half-way),
``drift`` (from that step on the rank nudges its parameters after every step: a replica that departs)
``other-device`` (the same, from a rank that counts as a device of its own kind, as a CPU rank
beside GPU ranks: :mod:`hpcbench.train.replicas`; under ``mpi`` that rank also copies its
gradients in and out of host buckets, as a GPU rank without CUDA-aware MPI does) and ``slow``
(from that step on the rank computes ``$HPCBENCH_SLOW_BY`` seconds longer each step, 0.05 when
unset, before its collective: a straggler, as a node with a throttled GPU or a noisy neighbour
makes one; :mod:`hpcbench.measure.stragglers` names it).

The slow-step drill, ``HPCBENCH_STEP_DELAY=SECONDS``, makes every rank sleep that long before each
training step: a tiny model then runs as long as a big one would, with its small checkpoints, so a
job is still running when a signal, a time limit or a cancel reaches it (tests and rehearsals use
it in place of a big model as a clock). A value that is not a number from 0 to 60 is ignored.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FAIL_AT_VARIABLE = "HPCBENCH_FAIL_AT"
STEP_DELAY_VARIABLE = "HPCBENCH_STEP_DELAY"
MAX_STEP_DELAY_S = 60.0
SLOW_BY_VARIABLE = "HPCBENCH_SLOW_BY"
MODES = ("raise", "kill", "hang", "stop", "disk-full", "drift", "other-device", "slow")
PASSIVE = ("disk-full", "drift", "other-device", "slow")  # acted on elsewhere, not before a step


@dataclass(frozen=True)
class Drill:
    rank: int
    step: int
    mode: str


def drill_for(rank: int) -> Drill | None:
    """This rank's drill, if ``$HPCBENCH_FAIL_AT`` names it (several drills, one per rank, are
    separated by commas; a malformed one names none)."""
    for item in os.environ.get(FAIL_AT_VARIABLE, "").split(","):
        parts = [p.strip() for p in item.split(":")]
        if len(parts) not in (2, 3) or not (parts[0].isdigit() and parts[1].isdigit()):
            continue
        mode = parts[2] if len(parts) == 3 else "raise"
        if mode in MODES and int(parts[0]) == rank:
            return Drill(int(parts[0]), int(parts[1]), mode)
    return None


def _seconds(variable: str, default: float) -> float:
    """``$variable`` as seconds from 0 to :data:`MAX_STEP_DELAY_S`; ``default`` when it is unset
    or anything else."""
    try:
        seconds = float(os.environ.get(variable, "") or default)
    except ValueError:
        return default
    return seconds if 0 < seconds <= MAX_STEP_DELAY_S else default


def step_delay() -> float:
    """Seconds each rank sleeps before every training step (``$HPCBENCH_STEP_DELAY``; 0 when it
    is unset or not a number from 0 to :data:`MAX_STEP_DELAY_S`)."""
    return _seconds(STEP_DELAY_VARIABLE, 0.0)


def slow_by() -> float:
    """Seconds the ``slow`` drill adds to each step (``$HPCBENCH_SLOW_BY``, 0.05 when unset or
    not a number from 0 to :data:`MAX_STEP_DELAY_S`)."""
    return _seconds(SLOW_BY_VARIABLE, 0.05)


def install_slow(model: Any, drill: Drill | None, steps_done: Callable[[], int]) -> None:
    """The ``slow`` drill: from its step on, this rank's training forward pass takes
    :func:`slow_by` seconds longer (a hook after the forward: after any collective that opens
    the step, such as DDP's buffer broadcast, and before the gradients' collective, where the
    other ranks then wait for it)."""
    if drill is None or drill.mode != "slow":
        return
    delay = slow_by()

    def hook(module: Any, inputs: Any, output: Any) -> None:
        if module.training and steps_done() >= drill.step:
            time.sleep(delay)

    model.register_forward_hook(hook)


def act(drill: Drill, steps_done: int, noun: str = "step", program: str = "hpcbench train") -> None:
    """Misbehave if this is the drill's step (called before each training step; ``noun`` and
    ``program`` name what is counted and who prints, for other programs' drills)."""
    if steps_done != drill.step or drill.mode in PASSIVE:
        return
    what = f"failure drill: rank {drill.rank} {{}} at {noun} {steps_done} ({FAIL_AT_VARIABLE})"
    if drill.mode == "raise":
        raise RuntimeError(what.format("fails"))
    doing = {"kill": "is killed (SIGKILL)", "stop": "asks to stop (SIGUSR2)", "hang": "hangs"}
    print(f"{program}: {what.format(doing[drill.mode])}", flush=True)
    if drill.mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif drill.mode == "stop":
        os.kill(os.getpid(), signal.SIGUSR2)
    elif drill.mode == "hang":
        while True:
            time.sleep(3600)
