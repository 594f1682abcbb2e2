"""The record each rank of a measured run gathers to rank 0 (:func:`hpcbench.measure.finishing.rank_record`
writes it, :mod:`.exchange` carries it, :mod:`.documents` combines the ranks' into the run's
``metrics.json``): :class:`RankRecord`, its :class:`EpochRecord`, and the run's
:class:`RunMeta`. Types only."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from hpcbench.jsonfile import JSONObject
from hpcbench.run_documents import EnergyNode, PhaseWindow

if TYPE_CHECKING:
    from typing_extensions import NotRequired

    from hpcbench.placement.record import PlacementRecord


class RunMeta(TypedDict):
    """How the user named the measured run (None: not said; strategy and device also from a
    benchmark matrix's environment) and its own config."""

    model: str | None
    dataset: str | None
    strategy: str | None
    device: str | None
    config: JSONObject


class EpochRecord(TypedDict):
    """One epoch of a rank: seconds per phase, steps and samples, and the program's values."""

    seconds: dict[str, float]
    steps: int
    samples: int
    unknown_samples: int
    values: dict[str, float | None]


class RankRecord(TypedDict):
    """One rank's record (:func:`rank_record`), as gathered to rank 0 (``token``: rank 0's, of
    a run of several ranks; never in the documents)."""

    rank: int
    host: str
    began_at: float | None
    totals: dict[str, float]
    windows: list[PhaseWindow]
    steps: int
    samples: int
    unknown_samples: int
    first_batch: int | None
    epochs: list[EpochRecord]
    finals: dict[str, float | None]
    elapsed_s: float
    warnings: list[str]
    energy_node: EnergyNode | None
    placement: NotRequired[PlacementRecord]  # where it ran (a rank of an older hpcbench: none)
    token: NotRequired[str]
