"""What hpcbench knows of each training strategy without importing torch: one small class per
strategy (:class:`StrategyKind`) naming its implementation and answering the questions the
trainer's options, the bench matrix, the energy sampler and the scaling predictions ask.

A strategy is its implementation (a :class:`hpcbench.train.strategies.base.Strategy` subclass
in its own module of ``hpcbench/train/strategies/``, which imports torch) and its kind here:
``--strategy``, the bench matrix, the job shapes and the predictions learn it from this
registry (:data:`STRATEGY_KINDS`), and :func:`hpcbench.train.strategies.make_strategy` imports
its module only when it runs. The registry is found as every other
(:func:`hpcbench.plugins.discover`): the kinds of this module, then those of the modules other
distributions declare under the ``hpcbench.strategies`` entry point. A plug-in's declared module
defines a ``StrategyKind`` subclass and imports no torch (every command of the submit side loads
it, on login nodes without torch); its ``implementation`` names the ``Strategy`` subclass, in a
module of its own that imports torch when a run uses it.
"""

from __future__ import annotations

from typing import ClassVar

from hpcbench.plugins import STRATEGY_GROUP, discover
from hpcbench.train.strategy_options import GradientExchangeOptions, MpiOptions


class StrategyKind:
    """One strategy's facts; a subclass with a ``name`` is registered."""

    #: the name users give (``--strategy NAME``, a matrix's ``strategy``)
    name: ClassVar[str] = ""
    #: ``module:Class`` of its implementation (imported when a run uses it)
    implementation: ClassVar[str] = ""
    #: one process drives every GPU of its node (torch.nn.DataParallel): one rank, CUDA only, one
    #: node, and its job holds the node's GPUs in one task
    drives_node_gpus: ClassVar[bool] = False
    #: one process on one device: the baseline every matrix measures first
    one_device: ClassVar[bool] = False
    #: its ranks talk through MPI: started by mpiexec or srun (never torchrun), and the automatic
    #: choice under an MPI launcher
    mpi: ClassVar[bool] = False
    #: it sends gradients between ranks, so --grad-compression applies
    compresses_gradients: ClassVar[bool] = False
    #: --compile can compile its step
    compiles: ClassVar[bool] = True
    #: the collective backends its all-reduce runs on (the scaling predictions' fits)
    backends: ClassVar[tuple[str, ...]] = ()
    #: its provenance names torch.distributed's backend
    reports_backend: ClassVar[bool] = False
    #: the dataclasses of the options it reads that no other strategy needs (shared ones, such
    #: as the gradient exchange of ddp and mpi, named by each that reads them): they join the
    #: trainer's ``parallelism`` options, flags and configuration keys
    options: ClassVar[tuple[type, ...]] = ()

    @classmethod
    def default_launcher(cls, own_trainer: bool = True) -> str:
        """What starts a run of it when the matrix names no launcher: mpiexec for MPI ranks;
        hpcbench's trainer as one process (single, dp) directly, with no agent in front; a
        user's program of one process under torchrun (a world of one: a script written for
        torchrun, calling ``init_process_group``, runs unchanged); torchrun otherwise."""
        if cls.mpi:
            return "mpiexec"
        if own_trainer and (cls.one_device or cls.drives_node_gpus):
            return "direct"
        return "torchrun"

    @classmethod
    def matrix_problem(
        cls, devices: int, device: str, nodes: int, launcher: str
    ) -> tuple[str, str]:
        """('', '') for a configuration this strategy can run, else (the matrix key, why)."""
        if cls.one_device and devices != 1:
            return "ranks_per_node", f"{cls.name} runs one process on one device; use ddp or mpi"
        if cls.drives_node_gpus and (device != "cuda" or nodes != 1):
            return "strategy", (
                f'{cls.name} drives the GPUs of one node from one process: device = "cuda", '
                "nodes = 1"
            )
        if cls.mpi and launcher == "torchrun":
            return "launcher", f"{cls.name} ranks are started by mpiexec or srun, not torchrun"
        if launcher == "direct" and not (cls.one_device or cls.drives_node_gpus):
            return "launcher", (
                f"direct starts one process without a launcher's rendezvous; {cls.name} ranks "
                f"are started by {cls.default_launcher()}"
            )
        return "", ""


class Single(StrategyKind):
    name = "single"
    implementation = "hpcbench.train.strategies.single:SingleStrategy"
    one_device = True


class DistributedDataParallel(StrategyKind):
    name = "ddp"
    implementation = "hpcbench.train.strategies.ddp:DDPStrategy"
    compresses_gradients = True
    backends = ("nccl", "gloo")
    reports_backend = True
    options = (GradientExchangeOptions,)


class Mpi(StrategyKind):
    name = "mpi"
    implementation = "hpcbench.train.strategies.mpi:MPIStrategy"
    mpi = True
    compresses_gradients = True
    backends = ("mpi",)
    options = (GradientExchangeOptions, MpiOptions)


class DataParallel(StrategyKind):
    name = "dp"
    implementation = "hpcbench.train.strategies.dp:DataParallelStrategy"
    drives_node_gpus = True
    compiles = False


def strategy_kinds() -> dict[str, type[StrategyKind]]:
    """Every strategy by name, in the order they were declared (plug-ins' after these)."""
    return {cls.name: cls for cls in discover(__name__, StrategyKind, STRATEGY_GROUP)}


#: every strategy by name: single, ddp, mpi, dp (and the plug-ins')
STRATEGY_KINDS: dict[str, type[StrategyKind]] = strategy_kinds()
