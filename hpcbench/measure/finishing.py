"""The end of a measurement (:func:`finish_run`): its open phases closed, its telemetry and
energy sampler stopped, this rank's record (:func:`rank_record`) gathered to rank 0
(:mod:`.exchange`), which writes the run's documents (:mod:`.documents`).

The rank's record is typed :class:`~hpcbench.measure.rank_records.RankRecord`."""

from __future__ import annotations

import contextlib
import time
import warnings
from pathlib import Path
from typing import Any

from hpcbench.measure.rank_records import RankRecord
from hpcbench.placement.record import placement_record
from hpcbench.run_documents import EnergyNode

Measurement = Any  # hpcbench.measure.recorder's, which imports this module


class MeasureWarning(UserWarning):
    """A measurement that went wrong (the user's run goes on)."""


def finish_run(m: Measurement) -> Path | None:
    """End ``m``: the path of ``metrics.json`` on rank 0 (None on the other ranks, and when
    nothing could be written: a warning says why)."""
    from hpcbench.measure.documents import RunFacts, write_documents
    from hpcbench.measure.exchange import gather

    if m.launch is None or m.run_dir is None:
        m._fault("finish", RuntimeError("the measurement never started"))
        return None
    while m._open:
        name = m._open[-1][0]
        m._fault("finish", RuntimeError(f"phase {name!r} still open at the end: closed"))
        m.end(name)
    m.ended = time.perf_counter()
    m._close_live()
    if not m.epochs and m.steps:  # a run without epochs is one epoch
        m.epoch()
    node = None
    sampler, m._sampler = m._sampler, None
    if sampler is not None:
        from hpcbench.measure.node_energy import stop_sampler

        node = stop_sampler(sampler)
    said = len(m.warnings)
    records = gather(m.record(node), m.launch, m.run_dir, m.timeout)
    for line in m.warnings[said:]:  # the exchange's own (in the documents too)
        with contextlib.suppress(Exception):
            warnings.warn(f"hpcbench.measure: {line}", MeasureWarning, stacklevel=4)
    if records is None:
        return None
    facts = RunFacts(m.meta, m.launch, m.run_dir, m.energy, m.energy_interval)
    return write_documents(facts, records)


def rank_record(m: Measurement, node: EnergyNode | None = None) -> RankRecord:
    """``m``'s record, as gathered to rank 0 (JSON-able; rank 0's carries the run's token)."""
    launch = m.launch
    assert launch is not None
    return {
        "rank": launch.rank,
        "host": launch.hostname,
        "began_at": getattr(m, "wall_started", None),
        "totals": m.totals,
        "windows": m.windows,
        "steps": m.steps,
        "samples": m.samples,
        "unknown_samples": m.unknown_samples,
        "first_batch": m.first_batch,
        "epochs": m.epochs,
        "finals": m.finals,
        "elapsed_s": m.ended - m.started,
        "warnings": m.warnings,
        "energy_node": node,
        "placement": placement_record(launch),
        **({"token": m.token} if m.token else {}),
    }
