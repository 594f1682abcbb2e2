"""Everything a training run does besides learning, behind one object called at named points of
:mod:`.loop`'s epoch and step (the shape of a Lightning callback): the failure drills
(:mod:`.drills`), the hang watchdog and the stop signals (:mod:`.stopping`), telemetry and
profiler traces (:mod:`.live`), rank 0's progress bar, the checks that the gradients were finite
(:mod:`.finite`), the re-synchronisation of replicas on different kinds of device
(:mod:`.replicas`), the cadence of mid-epoch checkpoints, and rank 0's TensorBoard log
(:mod:`.tensorboard`).

The points, in the order a step meets them: :meth:`RunHooks.before_batch`,
:meth:`~RunHooks.waiting_for_data` (around the batch's wait), :meth:`~RunHooks.before_step`,
:meth:`~RunHooks.after_update`, :meth:`~RunHooks.after_step`, :meth:`~RunHooks.step_end`,
:meth:`~RunHooks.checkpoint_due`; around them :meth:`~RunHooks.epoch_start`,
:meth:`~RunHooks.steps_end`, :meth:`~RunHooks.epoch_end`, :meth:`~RunHooks.training_end`,
:meth:`~RunHooks.run_end` and, whatever happened, :meth:`~RunHooks.close`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import torch

from hpcbench.run_documents import EpochRow, Metrics
from hpcbench.train.drills import Drill, act, install_slow, step_delay
from hpcbench.train.failures import diverged_at_step
from hpcbench.train.finite import Verdicts
from hpcbench.train.live import Live, progress_bar
from hpcbench.train.replicas import Replicas, nudge
from hpcbench.train.run_state import Learner, Position
from hpcbench.train.stopping import StopRequest, Watchdog
from hpcbench.train.tensorboard import NullBoard

if TYPE_CHECKING:
    from hpcbench.progress import Progress
    from hpcbench.train.config import TrainConfig
    from hpcbench.train.runtime import Runtime
    from hpcbench.train.strategies.base import Strategy


class RunHooks:
    """One rank's hooks for one run. What they act on (the position, the learner, the strategy)
    is given once; each point then takes only what the step has just produced."""

    def __init__(
        self,
        config: TrainConfig,
        runtime: Runtime,
        strategy: Strategy,
        learner: Learner,
        position: Position,
        *,
        steps_per_epoch: int,
        drill: Drill | None,
        stop: StopRequest,
        replicas: Replicas,
    ) -> None:
        self.config, self.runtime, self.strategy = config, runtime, strategy
        self.learner, self.position, self.steps_per_epoch = learner, position, steps_per_epoch
        self.drill = drill  # this rank's failure drill ($HPCBENCH_FAIL_AT)
        self.delay = step_delay()  # the slow-step drill's seconds before each step
        self.stop = stop  # the stop signals this process received
        self.request_checked = 0.0  # when rank 0 last looked for the job's stop request
        self.watchdog = Watchdog(config.checkpoints.hang_timeout, runtime.rank)
        self.verdicts = Verdicts()  # steps' finite flags not yet read
        self.replicas = replicas  # ranks on different kinds of device: re-synced from rank 0
        self.board: NullBoard = NullBoard()  # rank 0's --tensorboard log
        self.live = Live()  # telemetry and traces (--telemetry, --trace-steps)
        self.progress: Progress | None = None  # rank 0's bar for this epoch's steps

    def attach(self, model: torch.nn.Module) -> None:
        """The placed model's own hooks: the ``slow`` drill's delay after its forward pass."""
        install_slow(model, self.drill, lambda: self.position.steps_done)

    # ---- the epoch ---------------------------------------------------------------------------
    def epoch_start(self, epoch: int) -> None:
        self.progress = progress_bar(self.config, self.runtime.rank, self.steps_per_epoch, epoch)

    def steps_end(self) -> None:
        """The epoch's last step is done: nothing to watch, and no step's gradients unread."""
        self.watchdog.at(None, self.position.steps_done)
        self.check_finite()

    def epoch_timed(self) -> None:
        """The epoch's training time is taken: the progress bar ends."""
        if self.progress is not None:
            self.progress.close()

    def epoch_end(self, row: EpochRow) -> None:
        self.board.epoch(row)

    # ---- the step ----------------------------------------------------------------------------
    def before_batch(self) -> None:
        """Before the step's batch is read: the slow-step drill (before the watchdog's clock
        starts for this step), the watchdog, a failure drill due now, the profiler's step."""
        if self.delay:
            time.sleep(self.delay)
        steps_done = self.position.steps_done
        self.watchdog.at("batch", steps_done)
        if self.drill is not None:
            act(self.drill, steps_done)
        self.live.before(steps_done)

    def waiting_for_data(self) -> Any:
        """The wait for the batch, as a traced range."""
        return self.live.part("data")

    def before_step(self) -> None:
        """The batch is on the device: the step's computation starts."""
        self.live.started()
        self.watchdog.at("step", self.position.steps_done)

    def after_update(self, epoch: int, step: int, loss: torch.Tensor, flag: Any) -> None:
        """Forward, backward and update done: the step's finite flag kept (read at once by one
        rank when it may be bad), and the mixed-device drill's nudge to the weights."""
        if self.learner.precision.diverges:
            self.verdicts.add(flag, epoch, step, loss, self.learner.lr)
            if self.runtime.world_size == 1 and self.verdicts.maybe_bad():
                self.check_finite()
        nudge(self.strategy.eval_model, self.drill, self.position.steps_done)

    def after_step(self) -> None:
        """The step is counted: replicas re-synchronised when due."""
        if self.replicas.due(self.position.steps_done):
            self.resync()

    def step_end(
        self, epoch: int, step: int, samples: int, times: tuple[float, float, float], loss: Any
    ) -> None:
        """The step agreed on: its telemetry record, and the progress bar."""
        self.live.after(self.position.steps_done, samples, times, loss, epoch)
        if self.progress is not None:
            self.progress.update(step + 1)

    def checkpoint_due(self, last: bool) -> bool:
        """Whether a mid-epoch checkpoint falls after this step (``--checkpoint-every``; the
        epoch's ``last`` step has the epoch's own)."""
        every = self.config.checkpoints.checkpoint_every
        return bool(every) and self.position.steps_done % every == 0 and not last

    def stopping(self) -> None:
        """Every rank stops after this step's checkpoint."""
        self.watchdog.at(None, self.position.steps_done)
        if self.progress is not None:
            self.progress.close()

    # ---- what the ranks agree on -------------------------------------------------------------
    def stop_requested(self) -> bool:
        """Whether this rank received a stop signal; rank 0 also looks, once a second at most,
        for the job's stop request file (launchers that do not forward signals: MPICH's Hydra)."""
        if self.runtime.rank == 0 and not self.stop.requested:
            now = time.monotonic()
            if now - self.request_checked >= 1.0:
                self.request_checked = now
                self.stop.read_request_file()
        return self.stop.requested

    def check_finite(self) -> None:
        """Stop at the first step since the last look whose gradients were not finite (one host
        read; every rank holds the same flags, from the same synchronised gradients)."""
        bad = self.verdicts.first_bad()
        if bad is not None:
            world, rank = self.runtime.world_size, self.runtime.rank
            raise diverged_at_step(bad.epoch, bad.step, world, bad.loss, bad.lr, rank)

    def resync(self) -> None:
        """Ranks on different kinds of device take rank 0's state (:mod:`.replicas`)."""
        assert self.strategy.eval_model is not None
        model, optimizer = self.strategy.eval_model, self.learner.optimizer
        self.replicas.resync(self.strategy, model, optimizer, self.position.steps_done)

    # ---- the end -----------------------------------------------------------------------------
    def training_end(self) -> None:
        """Every epoch trained: the last telemetry record and trace are written."""
        self.live.close()

    def run_end(self, results: Metrics) -> None:
        self.board.finish(results)

    def close(self) -> None:
        """However the run ended: nothing more is watched, recorded or logged."""
        self.watchdog.at(None, self.position.steps_done)
        self.live.close(completed=False)  # after training_end: nothing more
        self.board.close()
