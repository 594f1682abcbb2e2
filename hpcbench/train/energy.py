"""The trainer's energy measurement (``--energy on``), around the run in :mod:`.entry`.

Local rank 0 of each node starts one sampler (:mod:`hpcbench.energy.sampler`) before set-up;
a barrier then makes sure every node's sampler reads before rank 0 opens its first phase window.
At the end, after a barrier (every rank's test is over), each sampler takes its last reading and
the nodes' records are gathered to rank 0 through the strategy (``gather_object``: a plain list
for ``single``/``dp``, mpi4py's ``gather`` for ``mpi``, ``torch.distributed.gather_object`` for
``ddp``); rank 0 splits them by phase with its ``phase_windows`` and writes energy.json.
Nothing here fails the run: what cannot be read is reported unavailable, with the reason.

GPUs marked used: those the node's ranks compute on, ``cuda:<local rank>`` (every visible GPU
for ``dp``), mapped through CUDA_VISIBLE_DEVICES as the ranks of a node share it (the runtime
makes the same assumption when it picks the device).
"""

from __future__ import annotations

import contextlib
import os

import torch

from hpcbench.energy.devices import Unavailable
from hpcbench.energy.sampler import Sampler, discover, energy_document
from hpcbench.run_documents import EnergyDocument, PhaseWindow
from hpcbench.train.config import TrainConfig
from hpcbench.train.runtime import Runtime
from hpcbench.train.strategies.base import Strategy
from hpcbench.train.strategy_kinds import STRATEGY_KINDS


def used_gpu_ordinals(runtime: Runtime, strategy: str) -> range:
    """The CUDA ordinals the ranks of this node compute on."""
    if runtime.device.type != "cuda":
        return range(0)
    gpus = torch.cuda.device_count()
    if STRATEGY_KINDS[strategy].drives_node_gpus:
        return range(gpus)
    return range(min(gpus, runtime.launch.local_world_size))


def node_sampler(config: TrainConfig, runtime: Runtime, strategy: str) -> Sampler:
    """This node's sampler; a discovery that fails unexpectedly becomes one unavailable device."""
    try:
        sources, nvml = discover(
            os.environ.get("CUDA_VISIBLE_DEVICES"), used_gpu_ordinals(runtime, strategy)
        )
    except Exception as err:
        sources, nvml = [Unavailable("node", "cpu", f"sampler could not start: {err}", True)], None
    return Sampler(
        sources, config.output.energy_interval, host=runtime.launch.hostname, nvml_module=nvml
    )


class RunEnergy:
    """One run's samplers (this rank's, if it is its node's local rank 0)."""

    def __init__(self, interval_s: float, sampler: Sampler | None) -> None:
        self.interval_s, self.sampler = interval_s, sampler

    @classmethod
    def start(cls, config: TrainConfig, runtime: Runtime, strategy: Strategy) -> RunEnergy | None:
        """Start the node's sampler on local rank 0 (None with ``--energy off``). Every rank."""
        if config.output.energy != "on":
            return None
        sampler = None
        if runtime.launch.local_rank == 0:
            sampler = node_sampler(config, runtime, strategy.name)
            sampler.start()
        strategy.barrier()
        return cls(config.output.energy_interval, sampler)

    def finish(self, strategy: Strategy, windows: list[PhaseWindow]) -> EnergyDocument | None:
        """Stop the samplers and gather the nodes' records: energy.json's content on rank 0
        (phases from rank 0's ``windows``), None elsewhere. Every rank."""
        strategy.barrier()
        node = None
        if self.sampler is not None:
            self.sampler.stop()
            node = self.sampler.node()
        gathered = strategy.gather_object(node)
        if gathered is None:
            return None
        nodes = [n for n in gathered if n is not None]
        return energy_document(nodes, self.interval_s, windows)

    def abandon(self) -> None:
        """Stop this rank's sampler after a failed run (no results)."""
        if self.sampler is not None:
            with contextlib.suppress(Exception):
                self.sampler.stop()


def energy_line(document: EnergyDocument) -> str:
    """The summary's line: joules of the devices measured, and what was not."""
    measured = [
        (node["host"], d)
        for node in document["nodes"]
        for d in node["devices"]
        if d["total_j"] is not None
    ]
    missing = [
        f"{d['name']} ({d['reason'] or 'no reading in a phase window'})"
        for node in document["nodes"]
        for d in node["devices"]
        if d["total_j"] is None
    ]
    parts = []
    if measured:
        total = sum(d["total_j"] for _, d in measured)
        names = ", ".join(d["name"] for _, d in measured)
        parts.append(f"{total:,.1f} J on {len(measured)} device(s) ({names})")
    if missing:
        parts.append("unavailable: " + "; ".join(missing))
    return "  energy: " + "; ".join(parts)
