"""The node's energy sampler for a measured run (``energy=True``): started by each node's local
rank 0 with the measurement, stopped at its end; the same devices and rules as the trainer's
(:mod:`hpcbench.energy.sampler`: what cannot be read is unavailable with its reason, never 0).
The GPUs marked used are ``cuda:<local rank>`` of the node's ranks when the program has torch
and CUDA."""

from __future__ import annotations

import os
import sys

from hpcbench.energy.devices import Unavailable
from hpcbench.energy.sampler import Sampler, discover
from hpcbench.run_documents import EnergyNode
from hpcbench.this_rank import LaunchInfo


def used_gpus(launch: LaunchInfo) -> range:
    """The CUDA ordinals the node's ranks compute on, as far as this process can tell without
    importing torch: none unless the program already did and sees GPUs."""
    torch = sys.modules.get("torch")
    try:
        gpus = torch.cuda.device_count() if torch is not None and torch.cuda.is_available() else 0
    except Exception:
        gpus = 0
    return range(min(gpus, launch.local_world_size))


def start_sampler(launch: LaunchInfo, interval_s: float) -> Sampler:
    """This node's sampler, started (a discovery that fails is one unavailable device)."""
    try:
        sources, nvml = discover(os.environ.get("CUDA_VISIBLE_DEVICES"), used_gpus(launch))
    except Exception as err:
        sources, nvml = [Unavailable("node", "cpu", f"sampler could not start: {err}", True)], None
    sampler = Sampler(sources, interval_s, host=launch.hostname, nvml_module=nvml)
    sampler.start()
    return sampler


def stop_sampler(sampler: Sampler) -> EnergyNode:
    """Stop it: the node's record, as gathered to rank 0."""
    sampler.stop()
    return sampler.node()
