"""What a sweep's results say: per setting, the ranking metric over its repetitions, its times
and its accuracy per epoch; the settings ranked, the best one first.

It reads the results directory once (``sweep.json`` and each task's ``metrics.json``) and
works from that; :mod:`hpcbench.sweep.report` draws and writes it. No torch here.
"""

from __future__ import annotations

from pathlib import Path
from statistics import median
from typing import TypedDict

from hpcbench.bench.reading.results_reader import AnalysisError, read_run_metrics
from hpcbench.bench.stats import Stat, summarise
from hpcbench.run_documents import Metrics
from hpcbench.sweep.documents import (
    MetricInfo,
    Setting,
    SettingResult,
    SweepAnalysis,
    TaskRecord,
    TaskResult,
)
from hpcbench.sweep.plan import METRICS, SweepError
from hpcbench.sweep.runner import load_plan


class _Group(TypedDict):
    """A setting's runs while they are read: their metrics and how many failed."""

    name: str
    setting: Setting
    metrics: list[Metrics]
    failed: int


def metric_value(metrics: Metrics, name: str) -> float | None:
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


def _read_metrics(directory: Path, run: str) -> Metrics | None:
    """The task's metrics.json, read as a bench run's is (None when it has none; a run
    directory that leads out of the results directory is refused, never read)."""
    try:
        return read_run_metrics(directory, f"runs/{run}")
    except AnalysisError as err:
        raise SweepError(str(err)) from None


def setting_name(task: TaskRecord) -> str:
    """A task's setting's name: its run directory's without the repetition."""
    return str(task["run"]).split(",rep=", 1)[0]


def analyse_sweep(results: str | Path) -> SweepAnalysis:
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
    groups: dict[str, _Group] = {}
    tasks: list[TaskResult] = []
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
    said = [m["run"].get("classes") for g in groups.values() for m in g["metrics"]
            if isinstance(m.get("run"), dict)]  # fmt: skip
    classes = {c for c in said if isinstance(c, int) and not isinstance(c, bool)} or {None}
    return {
        "sweep": sweep,
        "metric": {"name": metric, "words": words, "higher_is_better": higher, "unit": unit},
        "settings": settings,
        "ranking": [s["name"] for s in ranked],
        "tasks": tasks,
        "classes": classes.pop() if len(classes) == 1 else None,  # the runs' number of classes
    }


def _setting(group: _Group, metric: str) -> SettingResult:
    runs = group["metrics"]

    def stat(name: str) -> Stat | None:
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


def best_in_words(analysis: SweepAnalysis) -> str:
    """The best setting in one sentence (or why there is none): a tie is said as a tie, a best
    whose runs cannot be told from the runner-up's as such, and accuracies all at chance level
    (one in the number of classes) as no setting having learned anything."""
    m = analysis["metric"]
    if not analysis["ranking"]:
        return f"No setting has a {m['words']}: no task completed."
    by_name = {s["name"]: s for s in analysis["settings"]}
    ranked = [by_name[n] for n in analysis["ranking"]]
    best, stat = ranked[0], ranked[0]["metric"]
    if (chance := _chance(analysis)) is not None and all(
        s["metric"]["median"] <= chance * 1.1 for s in ranked
    ):
        return (
            f"No setting learned anything: every {m['words']} is at chance level "
            f"({fmt(chance, m)}, one in {round(1 / chance)} classes) or near it; the best is "
            f"{fmt(stat['median'], m)}. Train longer, or check the data."
        )
    tied = [s for s in ranked if fmt(s["metric"]["median"], m) == fmt(stat["median"], m)]
    if len(tied) > 1:
        names = "; ".join(_shown(s) for s in tied[:4]) + ("; …" if len(tied) > 4 else "")
        return (
            f"No single best setting by {m['words']}: {len(tied)} settings tie at "
            f"{fmt(stat['median'], m)} (median over {stat['n']} run(s)): {names}."
        )
    spread = (
        f" (95 % interval {fmt(stat['ci95'][0], m)} to {fmt(stat['ci95'][1], m)})"
        if stat["n"] > 1
        else " (one run: no spread)"
    )
    way = "highest" if m["higher_is_better"] else "lowest"
    runner_up = ""
    if len(ranked) > 1:
        second = ranked[1]["metric"]
        runner_up = f"; the next best has {fmt(second['median'], m)}"
        if stat["n"] < 2 or second["n"] < 2:
            runner_up += " (one run of one of them: not distinguishable)"
        elif _overlap(stat["ci95"], second["ci95"]):
            runner_up += (
                f", not distinguishable from the best with {min(stat['n'], second['n'])} runs "
                "(their 95 % intervals overlap)"
            )
    return (
        f"Best setting by {m['words']} ({way} median over {stat['n']} run(s)): {_shown(best)}, "
        f"with {fmt(stat['median'], m)}{spread}{runner_up}."
    )


def _shown(setting: SettingResult) -> str:
    return ", ".join(f"{k} = {v}" for k, v in setting["setting"].items()) or "the job as it is"


def _overlap(a: list[float | None] | None, b: list[float | None] | None) -> bool:
    if not a or not b or None in a or None in b:
        return True
    return not (a[1] < b[0] or b[1] < a[0])


def _chance(analysis: SweepAnalysis) -> float | None:
    """One in the number of classes, for an accuracy metric whose runs say how many classes
    there are (and all the same number); None otherwise."""
    if not analysis["metric"]["name"].endswith("accuracy"):
        return None
    classes = analysis.get("classes")
    return 1 / classes if isinstance(classes, int) and classes > 1 else None


def fmt(value: float | None, metric: MetricInfo) -> str:
    if value is None:
        return "n/a"
    if metric["name"].endswith("accuracy"):
        return f"{100 * value:.1f} %"
    unit = f" {metric['unit']}" if metric["unit"] else ""
    return f"{value:.4g}{unit}"
