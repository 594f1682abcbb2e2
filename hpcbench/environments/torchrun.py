"""torchrun's (torch.distributed.run's) variables: one agent per node starts its ranks."""

from __future__ import annotations

from hpcbench.environments.base import Environment, RankVariables


class Torchrun(Environment):
    name = "torchrun"
    order = 10
    ranks = RankVariables(
        ("RANK",),
        ("WORLD_SIZE",),
        ("LOCAL_RANK",),
        ("LOCAL_WORLD_SIZE",),
        ("GROUP_RANK",),
        requires="LOCAL_RANK",
    )
