"""What a prediction run leaves: ``predictions.csv``, ``predict.json`` and the printed summary.

``predictions.csv`` (written by the sink, atomically): one row per classified image in input
order -- ``item`` (its path as listed, or ``split/index`` of a dataset), ``source`` (a dataset's
sample: its source file, as the converted listing gave it), ``id`` (the listing's own image id,
where it had ids), ``label`` (the known class, else empty), ``class``, ``class_id`` (the class's
id in the source metadata, where it had ids) and ``probability`` of the top class, then
``class_2``… up to ``--top-k``. Columns the input cannot fill are left out. Probabilities are
float32 written with 9 significant digits (they read back to the same float32). A text cell that
a spreadsheet would run as a formula (it starts with ``= + - @``, tab or CR), or that starts with
``'``, gets a leading ``'``. Unreadable images have no row; ``predict.json`` lists them with the
reason.

``predict.json``: the mode and roles, the plan (per-stage costs, credits, predicted throughput),
the measured throughput, the per-stage and per-rank report, and -- when labels are known --
accuracy, macro-F1 and the confusion matrix (rows: true class, columns: predicted).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import numpy as np

from hpcbench.atomic import write_atomically, write_json_atomically
from hpcbench.csvfile import inert
from hpcbench.files import printable
from hpcbench.predict import stages
from hpcbench.predict.config import PredictConfig, PredictError
from hpcbench.predict.inputs import UNKNOWN, Items
from hpcbench.predict.model import LoadedModel
from hpcbench.predict.rank import warn

FORMAT = "hpcbench-predict/1"


class Collector:
    """Results units gathered into per-item probabilities (the sink's, or rank 0's, memory)."""

    def __init__(self, items: Items, classes: int) -> None:
        self.items = items
        self.probs = np.zeros((len(items), classes), dtype=np.float32)
        self.status = np.full(len(items), -1, dtype=np.int8)  # -1 none yet, 0 done, 1 skipped
        self.reasons: dict[int, str] = {}

    def add(self, unit: stages.Unit) -> None:
        ids, status, probs, reason_blob = unit.arrays
        ok = ids[status == 0]
        if len(ok):
            self.probs[ok] = probs
        bad = ids[status != 0]
        for i, why in zip(bad, stages.reasons_of(reason_blob), strict=True):
            self.reasons[int(i)] = why
        self.status[ids] = (status != 0).astype(np.int8)

    @property
    def missing(self) -> int:
        return int((self.status < 0).sum())


def predictions_csv(
    collector: Collector,
    class_names: list[str],
    top_k: int,
    class_ids: list[str] | None = None,
) -> str:
    """The CSV text; ``source``/``id`` columns where the input says them, ``class_id`` columns
    where the classes have ids (``class_ids``, else the input's own)."""
    items = collector.items
    class_ids = class_ids or items.class_ids
    k = min(top_k, len(class_names))
    out = io.StringIO()
    # RFC 4180's CRLF rows: the csv module then quotes every cell holding a CR or LF, so a name
    # with a carriage return reads back whole
    writer = csv.writer(out, lineterminator="\r\n")
    header = ["item"]
    header += ["source"] if items.sources is not None else []
    header += ["id"] if items.ids is not None else []
    header += ["label"]
    for j in range(1, k + 1):
        suffix = f"_{j}" if j > 1 else ""
        header += [f"class{suffix}"] + ([f"class_id{suffix}"] if class_ids else [])
        header += [f"probability{suffix}"]
    writer.writerow(header)
    done = np.flatnonzero(collector.status == 0)
    order = np.argsort(-collector.probs[done], axis=1, kind="stable")[:, :k]
    for row, i in enumerate(done):
        label = int(items.labels[i])
        cells = [items.names[i]]
        cells += [items.sources[i]] if items.sources is not None else []
        cells += [items.ids[i]] if items.ids is not None else []
        cells += [class_names[label] if label != UNKNOWN else ""]
        for c in order[row]:
            cells += [class_names[c]] + ([class_ids[c]] if class_ids else [])
            cells += [f"{float(collector.probs[i, c]):.9g}"]
        writer.writerow([inert(c) for c in cells])
    return out.getvalue()


def metrics(collector: Collector, class_names: list[str]) -> dict[str, Any] | None:
    """Accuracy, macro-F1 and the confusion matrix over the classified items with a label."""
    labels = collector.items.labels
    use = (collector.status == 0) & (labels != UNKNOWN)
    if not use.any():
        return None
    k = len(class_names)
    truth = labels[use]
    predicted = collector.probs[use].argmax(axis=1)
    confusion = np.zeros((k, k), dtype=np.int64)
    np.add.at(confusion, (truth, predicted), 1)
    tp = np.diag(confusion).astype(np.float64)
    support = confusion.sum(axis=1)
    claimed = confusion.sum(axis=0)
    # the trainer's definition: the mean F1 over the classes present in the labels
    f1 = np.where(support + claimed > 0, 2 * tp / np.maximum(support + claimed, 1), 0.0)
    present = support > 0
    return {
        "items": int(use.sum()),
        "accuracy": float(tp.sum() / use.sum()),
        "macro_f1": float(f1[present].mean()),
        "classes": class_names,
        "confusion": confusion.tolist(),
    }


def stage_report(ranks: list[dict[str, Any]], elapsed_s: float) -> list[dict[str, Any]]:
    """Per stage: ranks, items/s, busy %, waiting for input % and for credits % (means over its
    ranks, of the run's elapsed time)."""
    out = []
    for role in ("reader", "preprocess", "predict", "sink", "data-parallel", "single"):
        mine = [r for r in ranks if r["role"] == role]
        if not mine:
            continue
        span = max(elapsed_s, 1e-9)

        def pct(key: str, rows: list[dict[str, Any]] = mine, span: float = span) -> float:
            return 100.0 * sum(r[key] for r in rows) / (len(rows) * span)

        out.append(
            {
                "stage": role,
                "ranks": len(mine),
                "items": sum(r["items"] for r in mine),
                "items_per_s": sum(r["items"] for r in mine) / span,
                "busy_pct": pct("busy_s"),
                "wait_input_pct": pct("wait_input_s"),
                "wait_credit_pct": pct("wait_credit_s"),
                "peak_rss_mb": max(r["peak_rss_mb"] for r in mine),
                "max_growth_mb": max(r["growth_mb"] for r in mine),
            }
        )
    return out


def write(run_dir: Path, csv_text: str, document: dict[str, Any]) -> tuple[Path, Path]:
    run_dir.mkdir(parents=True, exist_ok=True)
    predictions = write_atomically(run_dir / "predictions.csv", csv_text)
    report = write_json_atomically(run_dir / "predict.json", document)
    return predictions, report


def summary(document: dict[str, Any], paths: tuple[Path, Path], quiet: bool = False) -> str:
    """What predict prints at the end; ``quiet`` (``-q``): without the plan and the stage
    table."""
    measured = document["measured"]
    rate = measured["items_per_s"] or 0.0
    lines = [
        f"classified {measured['items']} image(s) in {measured['seconds']:.2f} s: "
        f"{rate:.1f} images/s ({document['mode']}, {document['world_size']} rank(s))"
    ]
    if "unlabelled" in str(document.get("input") or "") and not quiet:
        lines.append(f"input: {printable(document['input'])}")
    plan = None if quiet else document.get("plan")
    if plan and plan["predicted_items_per_s"]:
        predicted = plan["predicted_items_per_s"]
        lines.append(
            f"roles {','.join(f'{k}={v}' for k, v in plan['roles'].items())}: predicted "
            f"{predicted:.1f} images/s (bound by {plan['bottleneck']}), measured "
            f"{rate / predicted:.2f}x of it"
        )
    rows = [] if quiet else document.get("stages") or []
    if rows:
        lines.append(f"{'stage':<14}{'ranks':>6}{'images/s':>10}{'busy%':>7}{'wait in%':>10}"
                     f"{'wait out%':>10}{'peak MB':>9}")  # fmt: skip
        for r in rows:
            lines.append(
                f"{r['stage']:<14}{r['ranks']:>6}{r['items_per_s']:>10.1f}{r['busy_pct']:>7.0f}"
                f"{r['wait_input_pct']:>10.0f}{r['wait_credit_pct']:>10.0f}{r['peak_rss_mb']:>9.0f}"
            )
    m = document.get("metrics")
    if m:
        lines.append(
            f"accuracy {m['accuracy']:.4f}, macro-F1 {m['macro_f1']:.4f} over {m['items']} labelled image(s)"
        )
    skipped = document.get("skipped") or []
    if skipped:
        lines.append(f"{len(skipped)} unreadable image(s) skipped (listed in predict.json)")
    lines.append(f"predictions: {paths[0]}; report: {paths[1]}")
    return "\n".join(lines)


def _warn_skipped(items: Items, collector: Collector) -> None:
    """Name the first 20 unreadable images on stderr, and count the others."""
    for i, why in sorted(collector.reasons.items())[:20]:
        where = printable(items.paths[i] if items.paths else items.names[i])
        warn(f"hpcbench predict: warning: {where}: unreadable image, skipped ({printable(why)})")
    if len(collector.reasons) > 20:
        warn(f"hpcbench predict: warning: {len(collector.reasons) - 20} more unreadable image(s)")


def finish(
    config: PredictConfig,
    mode: str,
    world: int,
    loaded: LoadedModel,
    items: Items,
    collector: Collector,
    elapsed: float,
    rank_rows: list[dict[str, Any]],
    planned: tuple[Any, Any] | None,
) -> dict[str, Any]:
    """Rank 0's end of a run in any mode: warn of skipped images, write ``predict.json`` and the
    predictions CSV, print the summary; the document."""
    classes = loaded.format.classes
    if collector.missing:
        raise PredictError(f"{collector.missing} image(s) never reached the sink")
    _warn_skipped(items, collector)
    done = int((collector.status == 0).sum())
    document: dict[str, Any] = {
        "format": FORMAT,
        "mode": mode,
        "world_size": world,
        "checkpoint": str(loaded.path),
        "model": loaded.model_name,
        "input": items.description,
        "batch_size": config.batch_size,
        "measured": {
            "items": done,
            "seconds": elapsed,
            "items_per_s": done / elapsed if elapsed > 0 else None,
        },
        "stages": stage_report(rank_rows, elapsed),
        "ranks": rank_rows,
        "metrics": metrics(collector, classes),
        "skipped": [
            {"item": items.names[i], "reason": why} for i, why in sorted(collector.reasons.items())
        ],
    }
    if planned is not None:
        the_plan, prof = planned
        document["plan"] = the_plan.as_dict()
        if prof is not None:
            document["profile"] = prof.as_dict()
            x = (
                the_plan.one_process_items_per_s
                if the_plan.alone
                else the_plan.predicted_items_per_s
            )
            document["measured"]["vs_predicted"] = (
                (done / elapsed) / x if x and elapsed > 0 else None
            )
    run_dir = Path(config.run_dir()).expanduser().resolve()
    csv_text = predictions_csv(collector, classes, config.top_k, loaded.format.class_ids)
    paths = write(run_dir, csv_text, document)
    document["files"] = {"predictions": str(paths[0]), "report": str(paths[1])}
    print(summary(document, paths, config.quiet), flush=True)
    return document
