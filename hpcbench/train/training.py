"""One rank's training run as :mod:`.loop` reads it: :class:`Training` holds the run's context
(options, runtime, strategy, data, clock), its :class:`~.run_state.Learner`, its
:class:`~.run_state.Position` and its :class:`~.hooks.RunHooks`. :func:`.start.start` makes
it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hpcbench.placement.record import PlacementRecord
from hpcbench.train.checkpoint_parts import Fingerprint
from hpcbench.train.config import TrainConfig
from hpcbench.train.data import TrainData
from hpcbench.train.hooks import RunHooks
from hpcbench.train.metrics import Clock, PhaseWindows
from hpcbench.train.run_state import Learner, Position
from hpcbench.train.runtime import Runtime
from hpcbench.train.strategies.base import Strategy

Log = Callable[[str], None]


@dataclass
class Training:
    """What set-up made and every epoch uses."""

    config: TrainConfig
    runtime: Runtime
    strategy: Strategy
    data: TrainData
    learner: Learner  # the model, the optimiser and its schedule, the loss, the precision
    position: Position  # the steps done, the epochs' rows, what a resumed run carried over
    hooks: RunHooks  # drills, watchdog, telemetry, progress, finite checks, replicas, board
    log: Log
    clock: Clock
    windows: PhaseWindows  # each phase's wall-clock bounds on this rank
    checkpoint_dir: Path
    fingerprint: Fingerprint  # what a checkpoint must match to be resumed from
    setup_s: float = 0.0  # the slowest rank's set-up seconds
    placement: list[PlacementRecord] | None = None  # every rank's place, on rank 0
