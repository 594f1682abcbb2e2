"""Sizing the pipeline from a measured profile: ranks per stage, where they go, credits per link,
and the throughput to expect.

Inputs (:class:`Profile`): each stage's CPU seconds per item on this hardware (read, decode and
resize, predict), the seconds per item of moving a unit across each link (a ping-pong between two
ranks of a unit of each size), and the node layout (ranks and usable cores per node).

Model: a stage of ``n`` ranks, costing ``c`` seconds per item (its work plus its sends and
receives), passes at most ``n / c`` items per second; a node whose ranks must do ``w`` seconds of
work per item passes at most ``cores / w`` items per second (ranks beyond the cores share them).
Predictors on a node with GPUs share them: no more of them
compute at once than the node has GPUs. The pipeline's throughput is the smallest of these
bounds. ``auto`` tries every split of the ranks (one sink; readers; preprocessors, or none:
readers then decode too; predictors) and keeps the fastest; ties go to the split with more
predictors. When even the fastest is predicted slower than one process doing every stage (the
transfers cost more than the split saves, or one GPU does all the predicting anyway), rank 0
predicts alone and the other ranks wait: never slower than one process by the calibration.

Credits (Little's law, L = λW): a consumer that takes λ units per second and waits W seconds
between handing back a credit and the unit's arrival (the producer's time per unit plus the
transfer) needs L = ⌈λW⌉ + 1 units in flight to never starve; they are shared among its
producers, at least one each. A rank's memory for units is then bounded by the credits:
(credits into it) × (incoming unit) + (credits out of it) × (outgoing unit) + the two it works on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from hpcbench.predict.config import Roles

MAX_CREDITS = 16


@dataclass(frozen=True)
class Profile:
    read_s: float  # seconds per item, reading
    prepare_s: float  # decoding, converting, resizing
    predict_s: float  # normalising, forward, softmax (per item at the batch size)
    sink_s: float  # collecting one result
    raw_link_s: float  # moving one item's raw bytes reader -> preprocessor
    prepared_link_s: float  # one prepared item -> predictor
    result_link_s: float  # one item's probabilities -> sink
    raw_item_bytes: float
    prepared_item_bytes: float
    result_item_bytes: float

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class Layout:
    """Node of each rank (rank order), usable cores per node and the GPUs its predictors run on
    (none: they run on the CPU)."""

    node_of_rank: list[int]
    cores: dict[int, int]
    gpus: dict[int, int] = field(default_factory=dict)

    @classmethod
    def one_node(cls, ranks: int, cores: int, gpus: int = 0) -> Layout:
        return cls([0] * ranks, {0: cores}, {0: gpus})


@dataclass
class Plan:
    roles: Roles
    role_of_rank: list[str]
    stage_cost_s: dict[str, float]  # seconds per item, per rank of the stage
    predicted_items_per_s: float | None
    bottleneck: str
    credits: dict[str, int]  # link name -> credits per (producer, consumer) pair
    memory_bound_bytes: dict[str, int]  # per rank of each role
    batch: int
    one_process_items_per_s: float | None = None  # what one process doing every stage passes
    alone: bool = False  # every split is predicted slower than one process: rank 0 works alone

    def ranks_of(self, role: str) -> list[int]:
        return [r for r, name in enumerate(self.role_of_rank) if name == role]

    def as_dict(self) -> dict[str, Any]:
        return {
            "roles": self.roles.as_dict(),
            "role_of_rank": self.role_of_rank,
            "stage_cost_ms_per_item": {k: v * 1e3 for k, v in self.stage_cost_s.items()},
            "predicted_items_per_s": self.predicted_items_per_s,
            "bottleneck": self.bottleneck,
            "credits": self.credits,
            "memory_bound_mb": {k: v / 2**20 for k, v in self.memory_bound_bytes.items()},
            "batch": self.batch,
            "one_process_items_per_s": self.one_process_items_per_s,
            "alone": self.alone,
        }


def stage_costs(profile: Profile, roles: Roles) -> dict[str, float]:
    """CPU seconds per item of each stage with these roles (work plus its sends and receives)."""
    p = profile
    if roles.preprocess:
        costs = {
            "reader": p.read_s + p.raw_link_s,
            "preprocess": p.raw_link_s + p.prepare_s + p.prepared_link_s,
        }
    else:  # readers decode too
        costs = {"reader": p.read_s + p.prepare_s + p.prepared_link_s}
    costs["predict"] = p.prepared_link_s + p.predict_s + p.result_link_s
    costs["sink"] = p.result_link_s + p.sink_s
    return costs


def assign_ranks(roles: Roles, layout: Layout) -> list[str]:
    """Rank 0 is the sink; the other ranks, taken one node after another (so that every stage
    spreads over the nodes), are dealt to readers, preprocessors, predictors."""
    world = len(layout.node_of_rank)
    local: dict[int, int] = {}
    order = []
    for r in range(1, world):
        node = layout.node_of_rank[r]
        order.append((local.get(node, 0), node, r))
        local[node] = local.get(node, 0) + 1
    order.sort()
    names = (
        ["reader"] * roles.reader + ["preprocess"] * roles.preprocess + ["predict"] * roles.predict
    )
    role_of_rank = ["sink"] * world
    for (_, _, r), name in zip(order, names, strict=True):
        role_of_rank[r] = name
    return role_of_rank


def throughput(
    costs: dict[str, float], roles: Roles, role_of_rank: list[str], layout: Layout
) -> tuple[float, str]:
    """(items per second, what bounds it) for these roles placed as ``role_of_rank``."""
    counts = roles.as_dict()
    best, why = math.inf, "nothing"
    for stage, cost in costs.items():
        n = counts[stage]
        if stage == "predict":  # predictors sharing a node's GPUs share them
            n = predictors_at_once(role_of_rank, layout)
        if n and cost > 0 and n / cost < best:
            best, why = n / cost, f"{stage} ({counts[stage]} rank(s))"
            if n < counts[stage]:
                why = f"predict ({counts[stage]} rank(s) sharing {n} GPU(s))"
    work: dict[int, float] = {}
    for r, stage in enumerate(role_of_rank):
        node = layout.node_of_rank[r]
        work[node] = work.get(node, 0.0) + costs[stage] / counts[stage]
    for node, w in work.items():
        cores = layout.cores.get(node, 1)
        if w > 0 and cores / w < best:
            best, why = cores / w, f"cores of node {node} ({cores})"
    return best, why


def predictors_at_once(role_of_rank: list[str], layout: Layout) -> int:
    """Predictors that can compute at the same time: on a node with GPUs, no more than its GPUs
    (predictors beyond take turns on them); on a CPU node, all of them (the cores bound is
    separate)."""
    per_node: dict[int, int] = {}
    for r, stage in enumerate(role_of_rank):
        if stage == "predict":
            node = layout.node_of_rank[r]
            per_node[node] = per_node.get(node, 0) + 1
    return sum(
        min(n, layout.gpus[node]) if layout.gpus.get(node) else n for node, n in per_node.items()
    )


def one_process(profile: Profile) -> float:
    """Items per second of one process doing every stage (no transfers)."""
    cost = profile.read_s + profile.prepare_s + profile.predict_s + profile.sink_s
    return 1.0 / cost if cost > 0 else math.inf


def candidates(world: int) -> list[Roles]:
    """Every split of ``world`` ranks into one sink, readers, preprocessors (or none) and
    predictors."""
    out = []
    for reader in range(1, world - 1):
        for preprocess in range(0, world - 1 - reader):
            predict = world - 1 - reader - preprocess
            if predict >= 1:
                out.append(Roles(reader, preprocess, predict))
    return out


def make_plan(
    profile: Profile,
    layout: Layout,
    batch: int,
    roles: Roles | None = None,
    credits: int | None = None,
) -> Plan:
    """The plan for ``roles`` (None: the fastest split) on ``layout``. With roles chosen here,
    a plan is never one the calibration predicts slower than one process: then rank 0 works
    alone (``alone``)."""
    world = len(layout.node_of_rank)
    chosen = roles is None
    if roles is None:
        scored = []
        for option in candidates(world):
            placed = assign_ranks(option, layout)
            x, _ = throughput(stage_costs(profile, option), option, placed, layout)
            scored.append((x, option.predict, -option.reader, option))
        roles = max(scored, key=lambda s: s[:3])[3]
    placed = assign_ranks(roles, layout)
    costs = stage_costs(profile, roles)
    x, why = throughput(costs, roles, placed, layout)
    links = size_credits(profile, roles, costs, x, batch, credits)
    return Plan(
        roles=roles,
        role_of_rank=placed,
        stage_cost_s=costs,
        predicted_items_per_s=x,
        bottleneck=why,
        credits=links,
        memory_bound_bytes=memory_bounds(profile, roles, links, batch),
        batch=batch,
        one_process_items_per_s=one_process(profile) if profile.predict_s > 0 else None,
        alone=chosen and profile.predict_s > 0 and x < one_process(profile),
    )


def _link_names(roles: Roles) -> list[tuple[str, str, str]]:
    """(link, producer stage, consumer stage) in pipeline order."""
    first = "preprocess" if roles.preprocess else "predict"
    links = [("reader->" + first, "reader", first)]
    if roles.preprocess:
        links.append(("preprocess->predict", "preprocess", "predict"))
    links.append(("predict->sink", "predict", "sink"))
    return links


def size_credits(
    profile: Profile,
    roles: Roles,
    costs: dict[str, float],
    items_per_s: float,
    batch: int,
    fixed: int | None = None,
) -> dict[str, int]:
    counts = roles.as_dict()
    out = {}
    for link, producer, consumer in _link_names(roles):
        if fixed is not None:
            out[link] = fixed
            continue
        unit_rate = items_per_s / batch / counts[consumer]  # λ: units per second per consumer
        transfer = {
            "reader": profile.raw_link_s if roles.preprocess else profile.prepared_link_s,
            "preprocess": profile.prepared_link_s,
            "predict": profile.result_link_s,
        }[producer]
        # W: the producer makes a unit (it may be busy with one already) and moves it
        wait = (2 * costs[producer] + transfer) * batch
        in_flight = math.ceil(unit_rate * wait) + 1 if math.isfinite(unit_rate) else 2
        out[link] = max(1, min(MAX_CREDITS, math.ceil(in_flight / counts[producer])))
    return out


def memory_bounds(
    profile: Profile, roles: Roles, credits: dict[str, int], batch: int
) -> dict[str, int]:
    """Bytes of units a rank of each role may hold at once."""
    counts = roles.as_dict()
    unit_out = {
        "reader": (profile.raw_item_bytes if roles.preprocess else profile.prepared_item_bytes),
        "preprocess": profile.prepared_item_bytes,
        "predict": profile.result_item_bytes,
        "sink": 0.0,
    }
    bounds = {stage: 0.0 for stage in counts if counts[stage]}
    for link, producer, consumer in _link_names(roles):
        unit = unit_out[producer] * batch
        # the producer holds what it sent until it is received; the consumer what it queued
        bounds[producer] += credits[link] * counts[consumer] * unit
        bounds[consumer] += credits[link] * counts[producer] * unit
    for stage in bounds:  # the unit in hand and the one it becomes
        bounds[stage] += (unit_out.get(stage, 0.0) + max(unit_out.values())) * batch
    return {stage: int(v) for stage, v in bounds.items()}
