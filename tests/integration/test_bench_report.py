"""``hpcbench report``: from a results directory written here in the layout ``hpcbench bench``
writes (bench.json, runs.json, each run's metrics.json, epochs.csv and energy.json, idle.json),
the report renders as Markdown and as one self-contained HTML page, which a real headless
browser (Debian's chromium) then opens: the screenshot is not blank and every figure loads.

The results are synthetic (no GPU and no RAPL in this VM, and a real matrix takes minutes): four
configurations, one without energy (RAPL unreadable), one run failed, and one configuration
named ``<script>alert(1)</script>`` with a hostile host and error, to show every string from the
files is escaped.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import need_module, require

need_module("matplotlib")
np = need_module("numpy")

from hpcbench.bench.reading.results_reader import load_results  # noqa: E402
from hpcbench.bench.reporting import figures, power_traces, report  # noqa: E402

HOSTILE = "<script>alert(1)</script>"
HOSTILE_HOST = "<b>node2</b>"
FAILED_ERROR = 'RuntimeError: NCCL watchdog timeout on rank 1 <img src=x onerror="alert(2)">'
RAPL_REASON = "no RAPL powercap readable (/sys/class/powercap absent)"
T0 = 1_700_000_000.0

# name, strategy, device, devices, phase seconds (setup, train, val, test), final accuracy
CONFIGS = [
    ("cpu", "single", "cpu", 1, (4.0, 90.0, 6.0, 3.0), 0.81),
    ("1dev", "single", "cuda", 1, (6.0, 18.0, 1.5, 0.8), 0.82),
    ("2dev-ddp", "ddp", "cuda", 2, (7.0, 10.0, 0.9, 0.5), 0.82),
    (HOSTILE, "ddp", "cuda", 2, (7.0, 11.0, 1.0, 0.5), 0.80),
]
WATTS = {"setup": 70.0, "train": 250.0, "val": 180.0, "test": 150.0}
EPOCHS, STEPS, BATCH = 3, 100, 64


def _write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


def _windows(start: float, phases: tuple[float, float, float, float]) -> list[dict[str, Any]]:
    setup, train, val, test = phases
    out, t = [{"phase": "setup", "start": start, "end": start + setup}], start + setup
    for _ in range(EPOCHS):
        out.append({"phase": "train", "start": t, "end": t + train / EPOCHS})
        t += train / EPOCHS
        out.append({"phase": "val", "start": t, "end": t + val / EPOCHS})
        t += val / EPOCHS
    out.append({"phase": "test", "start": t, "end": t + test})
    return out


def _phase_at(windows: list[dict[str, Any]], t: float) -> str | None:
    for w in windows:
        if w["start"] <= t < w["end"]:
            return w["phase"]
    return None


def _device(name: str, windows: list[dict[str, Any]], used: bool) -> dict[str, Any]:
    """An NVML-like device sampled every 0.5 s: cumulative joules of a piecewise power."""
    start, end = windows[0]["start"], windows[-1]["end"]
    times = list(np.arange(start, end, 0.5)) + [end]
    samples, joules, phases = [[times[0], 0.0]], 0.0, dict.fromkeys(WATTS, 0.0)
    for a, b in zip(times, times[1:], strict=False):
        phase = _phase_at(windows, (a + b) / 2) or "setup"
        watts = WATTS[phase] if used else 55.0
        joules += watts * (b - a)
        phases[phase] += watts * (b - a)
        samples.append([float(b), joules])
    return {
        "name": name,
        "kind": "gpu",
        "method": "nvml_counter",
        "reason": "",
        "used": used,
        "interval_s": 0.5,
        "samples": samples,
        "phases": phases,
        "total_j": joules,
    }


def write_results(root: Path) -> Path:
    """A results directory of a 4-configuration matrix, 3 timing + 1 energy run each."""
    matrix = {
        "name": "report-test",
        "repetitions": 3,
        "energy_repetitions": 1,
        "cooldown_s": 0.0,
        "energy_interval_s": 0.5,
        "trainer_args": ["--model", "small_cnn", "--epochs", str(EPOCHS)],
        "baseline_cpu": "cpu",
        "baseline_one_device": "1dev",
        "configs": [
            {
                "name": name,
                "strategy": strategy,
                "device": device,
                "nodes": 1,
                "ranks_per_node": devices,
                "devices": devices,
                "launcher": "torchrun",
                "trainer_args": [],
            }
            for name, strategy, device, devices, _, _ in CONFIGS
        ],
    }
    _write(
        root / "bench.json",
        {
            "format": "hpcbench-bench/1",
            "created": "2024-05-01T10:00:00+00:00",
            "matrix": matrix,
            "provenance": {
                "hpcbench": "0.1.0",
                "torch": "2.3.0",
                "mpi": None,
                "nccl": "2.20.5",
                "python": "3.11.2",
                "git": "0123456789abcdef",
                "hosts": ["node1", HOSTILE_HOST],
            },
        },
    )
    _write(
        root / "idle.json",
        {
            "seconds": 10.0,
            "interval_s": 0.5,
            "devices": [
                {
                    "host": "node1",
                    "name": n,
                    "kind": "gpu",
                    "method": "nvml_counter",
                    "reason": "",
                    "watts": 55.0,
                }
                for n in ("gpu0", "gpu1")
            ]
            + [
                {
                    "host": "node1",
                    "name": "package-0",
                    "kind": "cpu",
                    "method": "unavailable",
                    "reason": RAPL_REASON,
                    "watts": None,
                }
            ],
        },
    )
    runs, job = [], 100
    for index, (name, strategy, device, devices, phases, acc) in enumerate(CONFIGS):
        for kind, rep in [("timing", 1), ("timing", 2), ("timing", 3), ("energy", 1)]:
            job += 1
            run_dir = f"runs/c{index}/{kind}-{rep:02d}"
            started = T0 + job * 200
            failed = name == HOSTILE and kind == "timing" and rep == 3
            record = {
                "config": name,
                "kind": kind,
                "rep": rep,
                "status": "failed" if failed else "completed",
                "job_id": str(job),
                "scheduler": "local",
                "run_dir": run_dir,
                "started": started,
                "ended": started + 30.0,
                "error": FAILED_ERROR if failed else "",
            }
            runs.append(record)
            if failed:
                continue
            jitter = 1 + 0.02 * (rep - 2) + 0.003 * index
            setup, train, val, test = (p * jitter for p in phases)
            windows = _windows(started, (setup, train, val, test))
            epochs = [
                {
                    "epoch": e,
                    "train_loss": 1.5 / e,
                    "train_accuracy": acc - 0.3 / e,
                    "train_macro_f1": acc - 0.3 / e,
                    "val_loss": 1.6 / e,
                    "val_accuracy": acc - 0.25 / e + 0.003 * rep,
                    "val_macro_f1": acc - 0.25 / e,
                    "train_time_s": train / EPOCHS,
                    "val_time_s": val / EPOCHS,
                    "data_time_s": 0.1,
                    "compute_time_s": train / EPOCHS - 0.2,
                    "comm_time_s": 0.1,
                    "samples_per_s": STEPS * BATCH / (train / EPOCHS),
                    "lr": 0.1,
                    "bytes_read": 1000,
                }
                for e in range(1, EPOCHS + 1)
            ]
            metrics = {
                "run": {
                    "strategy": strategy,
                    "world_size": devices,
                    "device": device,
                    "global_batch": BATCH,
                    "epochs": EPOCHS,
                    "steps_per_epoch": STEPS,
                },
                "provenance": {"host": "node1", "job_id": str(job), "git": "0123456789abcdef"},
                "phases": {
                    "setup_s": setup,
                    "train_s": train,
                    "val_s": val,
                    "test_s": test,
                    "data_s": 0.3,
                    "compute_s": train - 0.6,
                    "comm_s": 0.3,
                },
                "throughput": {"train_samples_per_s": EPOCHS * STEPS * BATCH / train},
                "epochs": epochs,
                "test": {"loss": 0.5, "accuracy": acc, "macro_f1": acc - 0.01, "samples": 900},
                "phase_windows": windows,
            }
            d = root / run_dir
            _write(d / "metrics.json", metrics)
            with open(d / "epochs.csv", "w", newline="") as fh:
                w = csv.DictWriter(fh, fieldnames=list(epochs[0]))
                w.writeheader()
                w.writerows(epochs)
            if kind != "energy":
                continue
            if device == "cpu":
                devs = [
                    {
                        "name": "package-0",
                        "kind": "cpu",
                        "method": "unavailable",
                        "reason": RAPL_REASON,
                        "used": True,
                        "interval_s": 0.5,
                        "samples": [],
                        "phases": dict.fromkeys(WATTS),
                        "total_j": None,
                    }
                ]
            else:
                devs = [_device("gpu0", windows, True), _device("gpu1", windows, devices > 1)]
            host = HOSTILE_HOST if name == HOSTILE else "node1"
            _write(
                d / "energy.json",
                {
                    "format": "hpcbench-energy/1",
                    "interval_s": 0.5,
                    "nodes": [{"host": host, "devices": devs}],
                },
            )
    _write(root / "runs.json", {"format": "hpcbench-runs/1", "runs": runs})
    return root


def _stat(values: list[float]) -> dict[str, Any]:
    v = sorted(values)
    return {
        "n": len(v),
        "median": float(np.median(v)),
        "olympic_mean": float(np.mean(v)),
        "mean": float(np.mean(v)),
        "ci95": [v[0], v[-1]],
        "values": v,
    }


def _est(value: float, lo: float, hi: float) -> dict[str, Any]:
    return {"value": value, "ci95": [lo, hi]}


def analysis_dict(energy: bool = True) -> dict[str, Any]:
    """An analysis dict in the layout of hpcbench.bench.analysing.analysis.analyse, built by hand so the
    rendering is tested apart from the statistics (numbers rounded, consistent with the files)."""
    configs = []
    for name, strategy, device, devices, (setup, train, val, test), acc in CONFIGS:
        total = train + val + test
        one = 18.0 + 1.5 + 0.8
        speed = one / total
        on_gpu = device == "cuda"
        with_energy = energy and on_gpu
        configs.append(
            {
                "name": name,
                "devices": devices,
                "device": device,
                "strategy": strategy,
                "world_size": devices,
                "runs": {
                    "completed": 3 if name == HOSTILE else 4,
                    "failed": 1 if name == HOSTILE else 0,
                },
                "time": {
                    "total": _stat([total * 0.98, total, total * 1.02]),
                    "setup": _stat([setup * 0.98, setup, setup * 1.02]),
                    "train": _stat([train * 0.98, train, train * 1.02]),
                    "val": _stat([val * 0.98, val, val * 1.02]),
                    "test": _stat([test * 0.98, test, test * 1.02]),
                },
                "speedup_vs_cpu": _est((90 + 6 + 3) / total, 0.9 * 99 / total, 1.1 * 99 / total),
                "speedup_vs_one_device": _est(speed, speed * 0.95, speed * 1.05),
                "speedup_train_vs_one_device": _est(18 / train, 17 / train, 19 / train),
                "efficiency": _est(speed / devices, 0.95 * speed / devices, 1.05 * speed / devices)
                if on_gpu
                else None,
                "efficiency_train": _est(
                    18 / train / devices, 17 / train / devices, 19 / train / devices
                )
                if on_gpu
                else None,
                "karp_flatt": _est(0.12, 0.08, 0.16) if on_gpu and devices > 1 else None,
                "accuracy": {
                    "final": _stat([acc]),
                    "per_epoch": [[e, acc - 0.25 / e] for e in range(1, EPOCHS + 1)],
                },
                "throughput": _stat([EPOCHS * STEPS * BATCH / train]),
                "energy": {
                    "available": with_energy,
                    "reason": "" if with_energy else f"package-0 unavailable ({RAPL_REASON})",
                    "with_idle_reason": "",
                    "net_reason": "",
                    "window": "train+val+test" if with_energy else "",
                    "sources": [f"nvml_counter (gpu{i}, 0.5 s)" for i in range(2)]
                    if with_energy
                    else [f"unavailable (package-0: {RAPL_REASON})"],
                    "used_j": _stat([250.0 * total * devices]) if with_energy else None,
                    "with_idle_j": _stat([250.0 * total * 2]) if with_energy else None,
                    "net_j": _stat([195.0 * total * devices]) if with_energy else None,
                    "per_sample_j": _stat([250.0 * total * devices / 19200])
                    if with_energy
                    else None,
                    "edp": 250.0 * total * total * devices if with_energy else None,
                    "ed2p": None,
                    "edp_norm": total * total * devices / one / one if with_energy else None,
                    "edp_with_idle_norm": total * total / one / one if with_energy else None,
                    "ed2p_norm": None,
                },
            }
        )
    return {
        "name": "report-test",
        "baselines": {"cpu": "cpu", "one_device": "1dev"},
        "configs": configs,
        "differences": [
            {"a": "2dev-ddp", "b": "1dev", "metric": "total", "ratio": 0.56, "significant": True}
        ],
        "sentences": [
            "2dev-ddp: 1.79× faster than 1dev, 89.5 % efficient",
            f"{HOSTILE}: 1.62× faster than 1dev",
            f"cpu: energy not known: package-0 unavailable ({RAPL_REASON})",
        ],
    }


@pytest.fixture
def results(tmp_path: Path) -> Path:
    return write_results(tmp_path / "results")


class _Refs(HTMLParser):
    """Every tag and every attribute that could make a page load or run something."""

    def __init__(self) -> None:
        super().__init__()
        self.problems: list[str] = []
        self.images = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "link", "iframe", "frame", "object", "embed", "base", "meta") and not (
            tag == "meta" and all(k in ("charset", "name", "content") for k, _ in attrs)
        ):
            self.problems.append(f"<{tag}>")
        self.images += tag == "img"
        for key, value in attrs:
            if key.startswith("on"):
                self.problems.append(f"{tag} {key}")
            if key in ("src", "href", "srcset", "action", "poster", "data", "background"):
                if not (value or "").startswith("data:image/png;base64,"):
                    self.problems.append(f"{tag} {key}={(value or '')[:40]}")
            if key == "style" and re.search(r"url\(|@import", value or "", re.I):
                self.problems.append(f"{tag} style with url()")


def _html_problems(page: str) -> list[str]:
    """What makes the page depend on anything outside itself, or run script."""
    refs = _Refs()
    refs.feed(page)
    problems = refs.problems
    problems += [
        f"URL {u[:60]}" for u in re.findall(r"(?:https?|ftp|file):[^\s\"'<>]*", page, re.I)
    ]
    styles = re.findall(r"<style>(.*?)</style>", page, re.S)
    problems += ["CSS url() or @import" for css in styles if re.search(r"url\(|@import", css, re.I)]
    return problems


def test_report_from_an_analysis_dict(results: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    paths = report.render_report(results, analysis_dict(), out)
    md_path, html_path = paths[0], paths[1]
    assert (md_path, html_path) == (out / "report.md", out / "report.html")
    pngs = sorted(p.name for p in (out / "figures").glob("*.png"))
    assert pngs == ["accuracy.png", "energy.png", "phase_times.png", "power.png", "scaling.png"]
    for p in (out / "figures").glob("*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in out.rglob(".*")], "temporary files left behind"

    md = md_path.read_text()
    # the sentences, in words
    assert "- 2dev\\-ddp: 1.79× faster than 1dev, 89.5 % efficient" not in md  # '-' not escaped
    assert "- 2dev-ddp: 1.79× faster than 1dev, 89.5 % efficient" in md
    # the time table: median [95 % interval], n
    row = next(line for line in md.splitlines() if line.startswith("| 2dev-ddp | 11"))
    assert row.startswith("| 2dev-ddp | 11.4 s [11.2, 11.6], n = 3 | 7.00 s [6.86, 7.14], n = 3 |")
    assert "| configuration | total | set-up (not in total) | train | validation | test |" in md
    # scaling: speedup, efficiency and Karp–Flatt
    scaling = next(line for line in md.splitlines() if line.startswith("| 2dev-ddp | 2 |"))
    assert "| 1.78 × [1.69, 1.87] |" in scaling and "| 89.0 % [84.6, 93.5] |" in scaling
    assert "0.120 [0.0800, 0.160]" in scaling
    # energy: every source, or unavailable with its reason
    assert f"- cpu: unavailable: package-0 unavailable ({RAPL_REASON})" in md
    assert "- 1dev: nvml_counter (gpu0, 0.5 s); nvml_counter (gpu1, 0.5 s)" in md
    assert "| cpu | – | – | – | – | – | – | – | – | – |" in md
    assert (
        "| 1dev | train+val+test | 5 075 J, n = 1 | 10.2 kJ, n = 1 | 3 958 J, n = 1 | "
        "0.264 J, n = 1 | 103 022 | 1.00 | 1.00 | – |"
    ) in md
    assert "| 1dev | node1 | gpu1 | gpu | nvml_counter | 0.5 s | no |" in md
    # the failed run with its error, the provenance and job ids
    assert "\\<script\\>alert(1)\\</script\\>, timing run 3 (job 115, local)" in md
    assert "```text\n" + FAILED_ERROR + "\n```" in md
    assert "| git | 0123456789abcdef |" in md and "| 2dev-ddp | energy | 1 | completed |" in md
    assert "](figures/power.png)" in md
    # no raw HTML from the files in the Markdown either (a fenced code block shows it as text)
    outside_code = re.sub(r"```text\n.*?\n```", "", md, flags=re.S)
    assert not re.search(r"(?<!\\)<", outside_code)
    assert "\\<b\\>node2\\</b\\>" in outside_code

    page = html_path.read_text()
    assert _html_problems(page) == []
    assert page.count('<img class="plot"') == 5
    assert HOSTILE not in page and "<b>node2</b>" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;b&gt;node2&lt;/b&gt;" in page
    assert "NCCL watchdog timeout on rank 1 &lt;img src=x onerror=&quot;alert(2)&quot;&gt;" in page


def test_missing_figures_are_replaced_by_the_reason(results: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    (out / "figures").mkdir(parents=True)
    (out / "figures" / "energy.png").write_bytes(b"stale")  # from an earlier report
    analysis = analysis_dict(energy=False)
    for c in analysis["configs"]:
        c["speedup_vs_one_device"] = None
    analysis["baselines"]["one_device"] = None
    for energy_file in (results / "runs").rglob("energy.json"):  # no power to draw
        energy_file.unlink()
    report.render_report(results, analysis, out)
    assert sorted(p.name for p in (out / "figures").glob("*.png")) == [
        "accuracy.png",
        "phase_times.png",
    ]
    md = (out / "report.md").read_text()
    assert (
        "> No energy figure: the energy over all devices was not measured (cpu: package\\-0 unavailable"
        in md
        or (
            "> No energy figure: the energy over all devices was not measured (cpu: package-0 unavailable"
            in md
        )
    )
    assert "1dev: package-0 unavailable" in md
    assert "> No speedup figure: the matrix names no one-device baseline" in md
    assert "> No power figure: the energy over all devices was not measured" in md
    page = (out / "report.html").read_text()
    assert page.count("<img") == 2 and page.count('<p class="note">No ') == 3


def test_names_that_look_like_mathtext_are_drawn_as_text(tmp_path: Path) -> None:
    """matplotlib parses text between two ``$`` as TeX (and raises on bad TeX): names are data."""
    analysis = analysis_dict()
    analysis["configs"][2]["name"] = r"$\frac{$"
    plots = figures.render_all(analysis, [], tmp_path)
    assert [p.key for p in plots if p.path] == ["phase_times", "scaling", "accuracy", "energy"]


def test_watts_from_cumulative_joules() -> None:
    times, watts = power_traces.watts_from_samples(
        [[10.0, 0.0], [10.5, 50.0], [10.5, 50.0], [11.5, 250.0]]
    )
    assert times == [0.25, 1.0] and watts == [100.0, 200.0]
    assert power_traces.watts_from_samples([[1.0, 5.0]]) == ([], [])


def test_power_trace_read_from_energy_json(results: Path) -> None:
    traces = power_traces.power_traces(load_results(results))
    assert [t.config for t in traces] == sorted(c[0] for c in CONFIGS if c[2] == "cuda")
    t = next(t for t in traces if t.config == "1dev")
    labels = [s[0] for s in t.series]
    assert labels == ["node1:gpu0 (nvml_counter)", "node1:gpu1 (nvml_counter, unused)"]
    train_w = [
        w
        for x, w in zip(t.series[0][1], t.series[0][2], strict=True)
        if any(p == "train" and a + 0.5 < x < b - 0.5 for p, a, b in t.phases)
    ]
    assert train_w and all(abs(w - 250.0) < 1e-6 for w in train_w)
    assert {p for p, _, _ in t.phases} == {"setup", "train", "val", "test"}


def test_end_to_end_from_a_results_directory(results: Path) -> None:
    """build_report with the real analysis: load_results, analyse, write_tables."""
    paths = report.build_report(results)
    out = results / "report"
    assert paths[:2] == [out / "report.md", out / "report.html"]
    assert {p.name for p in paths if p.suffix == ".csv"} >= {"times.csv", "scaling.csv"}
    assert all(p.exists() for p in paths)
    md = (out / "report.md").read_text()
    assert "unavailable: " in md and RAPL_REASON.split(" (")[0] in md
    assert "NCCL watchdog timeout on rank 1" in md
    assert (out / "figures" / "power.png").exists() and (out / "figures" / "energy.png").exists()
    page = (out / "report.html").read_text()
    assert _html_problems(page) == [] and HOSTILE not in page
    assert page.count('<img class="plot"') == 5


def test_build_report_names_a_directory_that_is_not_results(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "bench.json"))):
        report.build_report(tmp_path)


# ---------------------------------------------------------------------------------- browser

CHECK = """<script>
addEventListener("load", () => {
  const imgs = Array.from(document.images);
  const ok = imgs.filter((i) => i.complete && i.naturalWidth > 0).length;
  document.title = "loaded " + ok + " of " + imgs.length;
});
</script>"""


def _chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("chromium")
    assert exe
    return subprocess.run(
        [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-dev-shm-usage",
            f"--user-data-dir={tmp / 'profile'}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_html_renders_in_a_real_browser(results: Path, tmp_path: Path) -> None:
    require(shutil.which("chromium") is not None, "chromium")
    from PIL import Image

    out = tmp_path / "report"
    report.render_report(results, analysis_dict(), out)
    page = (out / "report.html").read_text()

    # every figure decodes: a copy of the page with a script that counts the loaded images
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", CHECK + "\n</body>"))
    done = _chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", probe.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    assert "<title>loaded 5 of 5</title>" in done.stdout, done.stdout[:300]
    # the page itself runs no script: the hostile name is text in the DOM
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in done.stdout

    shot = tmp_path / "shot.png"
    done = _chromium(
        tmp_path,
        f"--screenshot={shot}",
        "--window-size=1200,3000",
        "--hide-scrollbars",
        (out / "report.html").as_uri(),
    )
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=float)
    assert pixels.shape[:2] == (3000, 1200)
    assert pixels.std() > 10, "the screenshot is blank"
    # not only text: some of the screen is the figures' colours (Okabe–Ito blue of the bars)
    blue = np.all(np.abs(pixels - [0, 114, 178]) < 30, axis=-1)
    assert blue.sum() > 20_000


def test_a_phase_name_that_looks_like_mathtext_is_drawn_as_text(results: Path) -> None:
    """Phase names in metrics.json's phase windows reach the power figure's legend: data too."""
    for metrics_file in results.rglob("metrics.json"):
        metrics = json.loads(metrics_file.read_text())
        for window in metrics["phase_windows"]:
            if window["phase"] == "test":
                window["phase"] = r"$\frac{$"
        metrics_file.write_text(json.dumps(metrics))
    report.build_report(results)
    assert (results / "report" / "figures" / "power.png").exists()


def test_control_and_bidi_characters_from_the_files_never_reach_the_report(results: Path) -> None:
    """runs.json, energy.json and idle.json are data: a terminal escape (``cat report.md``
    would run it) or U+202E (which turns the text after it around) is written as an escape."""
    hostile = "\x1b]0;owned\x07\x1b[2J\u202eexe.txt\u2066"
    doc = json.loads((results / "runs.json").read_text())
    for run in doc["runs"]:
        if run["error"]:
            run["error"] = f"RuntimeError: {hostile}"
    (results / "runs.json").write_text(json.dumps(doc))
    for energy_file in results.rglob("energy.json"):
        energy = json.loads(energy_file.read_text())
        for node in energy["nodes"]:
            node["host"] = f"node{hostile}"
            for device in node["devices"]:
                device["reason"] = f"unreadable {hostile}"
        energy_file.write_text(json.dumps(energy))
    idle = {"devices": [{"name": f"gpu{hostile}", "kind": "gpu", "method": "unavailable",
                         "reason": hostile, "watts": None}]}  # fmt: skip
    (results / "idle.json").write_text(json.dumps(idle))
    report.build_report(results)
    for name in ("report.md", "report.html"):
        text = (results / "report" / name).read_text()
        bad = sorted(
            {hex(ord(c)) for c in text if c not in "\n" and not c.isprintable()} - {"0xa0"}
        )
        assert bad == [], (name, bad)
        assert "x1b" in text and "u202e" in text, name  # shown, not dropped


def test_the_accuracy_axis_shows_a_small_gap_as_small(tmp_path: Path) -> None:
    """Curves at 96 and 98 %: matplotlib's own limits would stretch the 2 points over the whole
    axis; the report's axis spans at least 25 points, inside 0..100."""
    assert figures.accuracy_range([96.0, 97.5, 98.0]) == (75.0, 100.0)
    assert figures.accuracy_range([10.0, 12.0]) == (0.0, 25.0)
    assert figures.accuracy_range([20.0, 90.0]) == (18.0, 92.0)
    analysis = analysis_dict()
    for i, c in enumerate(analysis["configs"]):
        c["accuracy"]["per_epoch"] = [[1, 0.96 + 0.005 * i], [2, 0.97 + 0.005 * i]]
    plot = figures.accuracy(analysis, tmp_path)
    assert plot.path is not None


def test_a_matrix_without_energy_runs_has_no_energy_section(results: Path) -> None:
    bench = json.loads((results / "bench.json").read_text())
    bench["matrix"]["energy_repetitions"] = 0
    (results / "bench.json").write_text(json.dumps(bench))
    doc = json.loads((results / "runs.json").read_text())
    doc["runs"] = [r for r in doc["runs"] if r["kind"] != "energy"]
    (results / "runs.json").write_text(json.dumps(doc))
    report.build_report(results)
    md = (results / "report" / "report.md").read_text()
    assert "## Energy" not in md and "energy not known" not in md and "No power figure" not in md
    assert not (results / "report" / "figures" / "power.png").exists()


def test_gpu_energy_beside_unreadable_rapl_is_in_the_report_table_and_summary(
    tmp_path: Path,
) -> None:
    """A GPU node whose RAPL is root-only: the report's table per kind of device holds the GPU's
    joules and EDP, the CPU row says why it was not read, and the summary says the same."""
    from hpcbench.bench.analysing.analysis import analyse
    from tests.unit.test_bench_analysis import BASE, _device, _two_configs

    rapl = "no RAPL powercap readable (/sys/class/powercap absent)"
    half = {**BASE, "train": 52.0}
    _two_configs(
        tmp_path / "results",
        [_device("gpu0", 3000.0, True, BASE), _device("package-0", None, True, BASE, reason=rapl)],
        [_device("gpu0", 1600.0, True, half), _device("package-0", None, True, half, reason=rapl)],
    )
    analysis = analyse(load_results(tmp_path / "results"))
    report.render_report(tmp_path / "results", analysis, tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    plain = md.replace("\\", "")
    assert "| 2dev-ddp | GPU | 1 600 J, n = 1 | 0.00208 J, n = 1 | 107 200 | 0.311 |" in plain
    assert f"| 2dev-ddp | CPU packages | not read: {rapl} |" in plain
    assert "GPU energy only: CPU packages unreadable" in md
    assert "energy not known" not in md
