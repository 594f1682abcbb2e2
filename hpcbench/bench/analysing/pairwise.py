"""Configurations compared with each other, not only with the baseline, and whether they did
the same work.

- :func:`pairwise`: every configuration against every other on the total time, the ratio of
  their medians with its bootstrap interval (:func:`hpcbench.bench.stats.ratio_of_medians`) and
  whether the difference is significant (:func:`hpcbench.bench.stats.significantly_different`,
  the rule of the differences from the baseline).
- :func:`batches`: the global batch each configuration trained with, and those that differ from
  the reference's (the one-device baseline, else the first configuration that says): a user's
  script with a fixed batch per rank trains 64 samples a step on two ranks against 32 on one, so
  its "speedup" compares different work (weak scaling) and says so.
"""

from __future__ import annotations

from hpcbench.bench import stats
from hpcbench.bench.analysis_types import Analysis, Batches, Comparison, ConfigAnalysis
from hpcbench.bench.reading.results_reader import Run, is_number


def global_batch(runs: list[Run]) -> int | None:
    """The global batch of ``runs`` (their ``metrics.json``'s ``run.global_batch``); None when
    none says or they disagree."""
    said = {
        int(r.metrics["run"]["global_batch"])
        for r in runs
        if r.metrics
        and isinstance(r.metrics.get("run"), dict)
        and is_number(r.metrics["run"].get("global_batch"))
        and r.metrics["run"]["global_batch"] > 0
    }
    return said.pop() if len(said) == 1 else None


def batches(configs: list[ConfigAnalysis], base: str | None) -> Batches:
    """``reference`` (the configuration the others are held to), its ``global_batch``, and
    ``different``: each configuration whose global batch is another (name -> its batch)."""
    known = [c for c in configs if c.get("global_batch") is not None]
    ref = next((c for c in known if c["name"] == base), known[0] if known else None)
    if ref is None:
        return {"reference": None, "global_batch": None, "different": {}}
    return {
        "reference": ref["name"],
        "global_batch": ref["global_batch"],
        "different": {
            c["name"]: c["global_batch"] for c in known if c["global_batch"] != ref["global_batch"]
        },
    }


def batch_note(name: str, work: Batches) -> str | None:
    """What a comparison of ``name`` with the reference must say when it trained another global
    batch (None when it did not)."""
    batch = (work.get("different") or {}).get(name)
    if batch is None:
        return None
    return (
        f"global batch {batch} against {work['global_batch']} of {work['reference']}: each "
        "step did different work, so this is weak scaling, not the same training done faster"
    )


def pairwise(configs: list[ConfigAnalysis], totals: dict[str, list[float]]) -> list[Comparison]:
    """Each configuration ``a`` against each other ``b`` (both orders): ``ratio`` = median total
    time of ``a`` ÷ that of ``b`` (an EST: value and 95 % interval; below 1, ``a`` is faster),
    ``significant`` and ``n`` (the runs of each side). Configurations without a completed
    timing run are left out."""
    timed = [c for c in configs if c["time"].get("total") and totals.get(c["name"])]
    out = []
    for a in timed:
        for b in timed:
            if a is b:
                continue
            out.append(
                {
                    "a": a["name"],
                    "b": b["name"],
                    "metric": "total",
                    "ratio": stats.ratio_of_medians(totals[a["name"]], totals[b["name"]]),
                    "significant": stats.significantly_different(
                        a["time"]["total"], b["time"]["total"]
                    ),
                    "n": [a["time"]["total"]["n"], b["time"]["total"]["n"]],
                }
            )
    return out


def significant_findings(analysis: Analysis) -> list[str]:
    """The significant differences of total time between configurations, in words, the largest
    first (each pair once, the faster configuration named first)."""
    batch = {c["name"]: c.get("global_batch") for c in analysis.get("configs") or []}
    found = []
    for d in analysis.get("pairwise") or []:
        ratio = d["ratio"]["value"]
        if not d["significant"] or not ratio or ratio >= 1:
            continue
        lo, hi = d["ratio"]["ci95"]
        text = (
            f"{d['a']} is {1 / ratio:.2f}× faster than {d['b']} (total time {ratio:.3g}× "
            f"[{lo:.3g}, {hi:.3g}], n = {d['n'][0]} and {d['n'][1]})"
        )
        a, b = batch.get(d["a"]), batch.get(d["b"])
        if a is not None and b is not None and a != b:
            text += f"; but global batch {a} against {b}: different work (weak scaling)"
        found.append((ratio, text))
    return [text for _, text in sorted(found)]
