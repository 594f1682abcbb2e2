"""A doctor run's figures in the results history's shape, for ``hpcbench history`` and for
``hpcbench check`` against a site's references.

One configuration per node (its name, with ``:`` as ``/``: a reference key's ``:`` separates the
profile): ``compute_gflops``, ``read_mbps`` (that node reading alone) and ``read_together_mbps``
(every node at once); ``world`` and ``pair A B``: the all-reduce's peak ``busbw_gbps``; ``node
NAME``: the same within one node (``mpi world``… where MPI reduced: its own figures).
"""

from __future__ import annotations

from typing import Any

from hpcbench.bench.analysing.key_figures import Figure


def config_name(node: str) -> str:
    return node.replace(":", "/")


def _one(value: Any) -> Figure | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
        return {"median": float(value), "ci95": None, "n": 1}
    return None


def doctor_figures(document: dict[str, Any]) -> dict[str, dict[str, Figure]]:
    """config -> figure -> statistic, from a ``doctor.json`` (steps that did not run give none)."""
    steps = document.get("steps") if isinstance(document.get("steps"), dict) else {}
    out: dict[str, dict[str, Figure]] = {}

    def put(config: str, figure: str, value: Any) -> None:
        if (stat := _one(value)) is not None:
            out.setdefault(config, {})[figure] = stat

    compute = steps.get("compute") or {}
    for node, value in (compute.get("nodes") or {}).items():
        put(config_name(node), "compute_gflops", value)
    filesystem = steps.get("filesystem") or {}
    for key, figure in (("alone_mbps", "read_mbps"), ("together_mbps", "read_together_mbps")):
        for node, value in (filesystem.get(key) or {}).items():
            put(config_name(node), figure, value)
    communication = steps.get("communication") or {}
    prefix = ["mpi"] if communication.get("backend") == "mpi" else []
    for sweep in communication.get("sweeps") or []:
        if isinstance(sweep, dict) and isinstance(sweep.get("group"), str):
            words = sweep["group"].split()
            put(" ".join([*prefix, words[0], *map(config_name, words[1:])]), "busbw_gbps",
                sweep.get("peak_gbps"))  # fmt: skip
    return out
