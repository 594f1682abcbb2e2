"""The job spec of each run of a benchmark matrix: the matrix's job with a configuration's
shape (nodes, GPUs, tasks, launcher) and the trainer's flags for a timing or an energy run,
and the spec of the idle-power measurement."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

from hpcbench.bench.matrix_program import run_variables
from hpcbench.bench.matrix_values import RESERVED_TRAINER_FLAGS
from hpcbench.bench.running.matrix import Config, Matrix, MatrixError
from hpcbench.jobs import submission
from hpcbench.train.strategy_kinds import STRATEGY_KINDS

#: the two kinds of run: timed, and with the energy sampler
TIMING, ENERGY = "timing", "energy"


def run_spec(matrix: Matrix, run: Any, output_dir: str, scheduler: str | None) -> Any:
    """The job spec of one run: the matrix's job with this configuration's shape."""
    config = matrix.config(run.config)
    base = submission.load_spec(matrix.job, smoke=matrix.smoke)
    if matrix.program is not None:
        return program_run_spec(matrix, run, output_dir, scheduler, base)
    for flag in base.program.args:
        if flag.split("=", 1)[0] in RESERVED_TRAINER_FLAGS:
            raise MatrixError(
                f"{matrix.job}: program.args: {flag.split('=', 1)[0]} is set by the "
                "matrix for each run; remove it from the job spec"
            )
    # the job's own program.args stay first: list overrides add to the file's list
    args = [*matrix.trainer_args, *config.trainer_args]
    given = [*base.program.args, *args]
    if not any(a.split("=", 1)[0].startswith(("--checkpoint", "--no-checkpoint")) for a in given):
        # a measurement run is repeated, not resumed: no checkpoint files in every run
        # directory of the matrix unless the matrix asks for them
        args = ["--no-checkpoint", *args]
    args += ["--strategy", config.strategy, "--device", config.device]
    if run.kind == ENERGY:
        args += ["--energy", "on", "--energy-interval", f"{matrix.energy_interval_s:g}"]
    spec = submission.load_spec(
        matrix.job,
        smoke=matrix.smoke,
        **job_shape(config),
        job_name=f"{matrix.name}-{config.name}-{run.kind}{run.rep:02d}",
        output_dir=output_dir,
        module="hpcbench.train",
        args=args,
        **({"scheduler": scheduler} if scheduler else {}),
    )
    if not config.launcher:  # started by the strategy's default: the job's launcher.args are
        _drop_unused_launcher_args(spec)  # its own launcher's
    return spec


def program_run_spec(
    matrix: Matrix, run: Any, output_dir: str, scheduler: str | None, base: Any
) -> Any:
    """A run of the program the matrix names: its arguments (the matrix's, then the
    configuration's), and its configuration and energy sampling in its environment, as
    :mod:`hpcbench.measure` reads them (the job spec's own variables kept)."""
    config = matrix.config(run.config)
    interval = matrix.energy_interval_s if run.kind == ENERGY else None
    variables = {
        **base.environment.variables,
        **run_variables(config.strategy, config.device, interval),
    }
    return submission.load_spec(
        matrix.job,
        smoke=matrix.smoke,
        **job_shape(config),
        job_name=f"{matrix.name}-{config.name}-{run.kind}{run.rep:02d}",
        output_dir=output_dir,
        **(matrix.program or {}),
        args=[*matrix.program_args, *config.program_args],
        variables=variables,
        requeue=False,
        **({"scheduler": scheduler} if scheduler else {}),
    )


def idle_spec(matrix: Matrix, output_dir: str, idle_file: Path, scheduler: str | None) -> Any:
    """The idle-power job: one task on one node holding as many GPUs as the widest CUDA
    configuration, running ``python -m hpcbench.energy idle`` and nothing of the trainer's
    (neither the job spec's program arguments nor its options file)."""
    m = matrix
    gpus = max((c.ranks_per_node for c in m.configs if c.device == "cuda"), default=0)
    spec = submission.load_spec(
        m.job,
        smoke=m.smoke,
        nodes=1,
        gpus_per_node=gpus,
        tasks_per_node=1,
        launcher="direct",  # no agent's start-up or polling on the node it measures idle
        job_name=f"{m.name}-idle",
        output_dir=output_dir,
        module="hpcbench.energy",
        **({"scheduler": scheduler} if scheduler else {}),
    )
    _drop_unused_launcher_args(spec)
    spec.program.config = None
    spec.program.args = ["idle", "--seconds", f"{m.idle_seconds:g}"] + [
        "--interval", f"{m.energy_interval_s:g}", "--output", str(idle_file)
    ]  # fmt: skip
    return spec


def _drop_unused_launcher_args(spec: Any) -> None:
    """A run the bench starts directly (no launcher) leaves out the arguments the job spec gives
    its own launcher: there is none to hand them to."""
    if spec.launcher.kind == "direct":
        spec.launcher.args = []


class JobShape(TypedDict):
    """A configuration's job: nodes, launcher, GPUs and tasks per node."""

    nodes: int
    launcher: str
    gpus_per_node: int
    tasks_per_node: int


def job_shape(config: Config) -> JobShape:
    """The job's resources and launcher for a configuration."""
    if STRATEGY_KINDS[config.strategy].drives_node_gpus:
        shape = {"gpus_per_node": config.ranks_per_node, "tasks_per_node": 1}
    elif config.device == "cuda":
        shape = {"gpus_per_node": config.ranks_per_node, "tasks_per_node": config.ranks_per_node}
    else:
        shape = {"gpus_per_node": 0, "tasks_per_node": config.ranks_per_node}
    return {"nodes": config.nodes, "launcher": config.launcher_kind, **shape}
