"""What a sweep's results say: per setting, the ranking metric over its repetitions, its times
and its accuracy per epoch; the settings ranked, the best one first.

It reads the results directory once (``sweep.json`` and each task's ``metrics.json``) and
works from that; :mod:`hpcbench.sweep.report` draws and writes it. No torch here.
"""

from __future__ import annotations

from pathlib import Path
from statistics import median
from typing import Any

from hpcbench.bench.results import inside
from hpcbench.bench.stats import summarise
from hpcbench.jsonfile import JsonFileError, read_json
from hpcbench.sweep.plan import METRICS, SweepError
from hpcbench.sweep.runner import METRICS_FILE, load_plan


def metric_value(metrics: dict[str, Any], name: str) -> float | None:
    """One figure of a run's ``metrics.json`` (:data:`hpcbench.sweep.plan.METRICS`); None when absent."""
    try:
        if name == "val_accuracy":
            value = metrics["validation"]
        elif name == "test_accuracy":
            value = (metrics.get("test") or {}).get("accuracy")
        elif name == "val_loss":
            value = metrics["epochs"][-1].get("val_loss")
        elif name == "samples_per_s":
            value = metrics["throughput"]["train_samples_per_s"]
        elif name == "total_s":
            ph = metrics["phases"]
            value = sum(float(ph.get(k) or 0.0) for k in ("setup_s", "train_s", "val_s", "test_s"))
        else:
            value = metrics["phases"][name]
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _read_metrics(directory: Path, run: str) -> dict[str, Any] | None:
    """The run's metrics.json (None when it has none); a run directory that leads out of the
    results directory (a link) is refused, never read."""
    path = directory / "runs" / run / METRICS_FILE
    if inside(directory, f"runs/{run}/{METRICS_FILE}") is None:
        raise SweepError(f"{path}: leads out of the results directory {directory}: not read")
    try:
        data = read_json(path)
    except JsonFileError as err:
        if err.missing:
            return None
        raise SweepError(str(err)) from None
    return data if isinstance(data, dict) else None


def setting_name(task: dict[str, Any]) -> str:
    """A task's setting's name: its run directory's without the repetition."""
    return str(task["run"]).split(",rep=", 1)[0]


def analyse_sweep(results: str | Path) -> dict[str, Any]:
    """The analysis of a sweep's results directory (JSON-able): ``sweep`` (as run), ``metric``
    (name, words, higher_is_better, unit), ``settings`` in plan order (each: name, setting,
    runs, failed, metric STAT, total_s and train_s STATs, epochs: per epoch the median
    validation and training accuracy), ``ranking`` (setting names, best first) and ``tasks``
    (each task: index, run, setting, rep, completed, metric)."""
    directory = Path(results)
    plan = load_plan(directory)
    sweep, metric = plan["sweep"], plan["sweep"].get("metric", "val_accuracy")
    if metric not in METRICS:
        raise SweepError(f"{directory / 'sweep.json'}: unknown metric {metric!r}")
    words, higher, unit = METRICS[metric]
    groups: dict[str, dict[str, Any]] = {}
    tasks = []
    for task in plan["tasks"]:
        name = setting_name(task)
        group = groups.setdefault(
            name, {"name": name, "setting": task["setting"], "metrics": [], "failed": 0}
        )
        found = _read_metrics(directory, task["run"])
        if found is None:
            group["failed"] += 1
        else:
            group["metrics"].append(found)
        tasks.append(
            {
                **task,
                "completed": found is not None,
                "metric": metric_value(found, metric) if found else None,
            }
        )
    settings = [_setting(g, metric) for g in groups.values()]
    ranked = [s for s in settings if s["metric"] is not None]
    ranked.sort(key=lambda s: s["metric"]["median"], reverse=higher)
    return {
        "sweep": sweep,
        "metric": {"name": metric, "words": words, "higher_is_better": higher, "unit": unit},
        "settings": settings,
        "ranking": [s["name"] for s in ranked],
        "tasks": tasks,
    }


def _setting(group: dict[str, Any], metric: str) -> dict[str, Any]:
    runs = group["metrics"]

    def stat(name: str) -> dict[str, Any] | None:
        return summarise([v for m in runs if (v := metric_value(m, name)) is not None])

    by_epoch: dict[int, dict[str, list[float]]] = {}
    for m in runs:
        for row in m.get("epochs") or []:
            if not isinstance(row, dict) or not isinstance(row.get("epoch"), int):
                continue
            slot = by_epoch.setdefault(row["epoch"], {"val": [], "train": []})
            for key, into in (("val_accuracy", "val"), ("train_accuracy", "train")):
                if isinstance(row.get(key), (int, float)):
                    slot[into].append(float(row[key]))
    epochs = [
        {
            "epoch": e,
            "val_accuracy": median(v["val"]) if v["val"] else None,
            "train_accuracy": median(v["train"]) if v["train"] else None,
        }
        for e, v in sorted(by_epoch.items())
    ]
    return {
        "name": group["name"],
        "setting": group["setting"],
        "runs": len(runs),
        "failed": group["failed"],
        "metric": stat(metric),
        "total_s": stat("total_s"),
        "train_s": stat("train_s"),
        "epochs": epochs,
    }


def best_in_words(analysis: dict[str, Any]) -> str:
    """The best setting in one sentence (or why there is none)."""
    m = analysis["metric"]
    if not analysis["ranking"]:
        return f"No setting has a {m['words']}: no task completed."
    by_name = {s["name"]: s for s in analysis["settings"]}
    best = by_name[analysis["ranking"][0]]
    stat = best["metric"]
    shown = ", ".join(f"{k} = {v}" for k, v in best["setting"].items()) or "the job as it is"
    spread = (
        f" (95 % interval {fmt(stat['ci95'][0], m)} to {fmt(stat['ci95'][1], m)})"
        if stat["n"] > 1
        else " (one run: no spread)"
    )
    way = "highest" if m["higher_is_better"] else "lowest"
    runner_up = ""
    if len(analysis["ranking"]) > 1:
        second = by_name[analysis["ranking"][1]]["metric"]
        runner_up = f"; the next best has {fmt(second['median'], m)}"
    return (
        f"Best setting by {m['words']} ({way} median over {stat['n']} run(s)): {shown}, "
        f"with {fmt(stat['median'], m)}{spread}{runner_up}."
    )


def fmt(value: float | None, metric: dict[str, Any]) -> str:
    if value is None:
        return "n/a"
    if metric["name"].endswith("accuracy"):
        return f"{100 * value:.1f} %"
    unit = f" {metric['unit']}" if metric["unit"] else ""
    return f"{value:.4g}{unit}"
