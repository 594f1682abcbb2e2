"""What a user sees of hpcbench, written to one directory for a before/after diff of a
restructuring: every rendered script (each batch system x launcher x node count x container
runtime, and every job spec shipped in jobs/), every ``--help`` of the command line and of the
trainer, every error of the spec loader for a set of bad specs, and one small fixed run's
metrics.json, epochs.csv and report.md with their times masked.

    python benchmarks/behaviour_snapshot.py /tmp/before      # on the old commit
    python benchmarks/behaviour_snapshot.py /tmp/after       # on the new one
    diff -r /tmp/before /tmp/after                            # nothing, when behaviour is unchanged

``--no-run`` leaves the training run out (it takes about a minute on two cores).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LAUNCHERS = ("torchrun", "mpiexec", "srun", "direct")
BAD_SPECS = {
    "unknown-table": {"resourcez": {}},
    "unknown-key": {"resources": {"nodez": 2}},
    "nodes-zero": {"resources": {"nodes": 0}},
    "nodes-text": {"resources": {"nodes": "two"}},
    "memory-bad": {"resources": {"memory": "lots"}},
    "time-bad": {"resources": {"time": "2 hours"}},
    "gpus-negative": {"resources": {"gpus_per_node": -1}},
    "launcher-unknown": {"launcher": {"kind": "pdsh"}},
    "runtime-unknown": {"environment": {"container": {"image": "/x.sif", "runtime": "docker"}}},
    "modules-not-list": {"environment": {"modules": "CUDA"}},
    "variables-bad-name": {"environment": {"variables": {"1BAD": "x"}}},
    "args-not-list": {"program": {"args": "--epochs 2"}},
    "script-and-module": {"program": {"script": "a.py", "module": "b"}},
    "array-bad": {"scheduler": {"array": "1-"}},
    "direct-two-nodes": {"resources": {"nodes": 2}, "launcher": {"kind": "direct"}},
}


def spec_for(launcher: str, nodes: int, runtime: str | None) -> dict:
    environment: dict = {"modules": ["CUDA/12.1"], "venv": "/opt/venvs/torch"}
    if runtime:
        environment["container"] = {"image": "/img/torch.sif", "runtime": runtime}
    return {
        "resources": {"nodes": nodes, "gpus_per_node": 2, "cpus_per_task": 4, "time": "01:00:00"}
        | ({"tasks_per_node": 1} if launcher == "direct" else {}),
        "environment": environment,
        "launcher": {"kind": launcher},
        "program": {"args": ["--epochs", "2"]},
        "scheduler": {"sge_pe": "mpi"} if nodes > 1 else {},
    }


def write(out: Path, name: str, text: str) -> None:
    path = out / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.replace(str(ROOT), "<checkout>"))  # one checkout's against another's


def scripts(out: Path) -> None:
    from hpcbench.jobs.containers import runtime_names
    from hpcbench.jobs.render import render_script
    from hpcbench.jobs.schedulers import SCHEDULER_CLASSES
    from hpcbench.jobs.spec_load import build_spec, load_spec

    def from_dict(raw: dict, scheduler: str) -> str:
        return render_script(build_spec(raw), scheduler)

    def from_file(toml: Path, scheduler: str) -> str:
        return render_script(load_spec(toml), scheduler)

    for scheduler in SCHEDULER_CLASSES:
        for launcher in LAUNCHERS:
            for nodes in (1, 2):
                for runtime in (None, *runtime_names()):
                    name = f"scripts/{scheduler}-{launcher}-{nodes}-{runtime or 'bare'}"
                    raw = spec_for(launcher, nodes, runtime)
                    write(out, name, outcome(from_dict, raw, scheduler))
        for toml in sorted((ROOT / "jobs").rglob("*.toml")):
            rel = toml.relative_to(ROOT / "jobs").as_posix().replace("/", "_")
            write(out, f"jobs/{scheduler}-{rel}", outcome(from_file, toml, scheduler))
    for name, raw in BAD_SPECS.items():
        write(out, f"spec-errors/{name}", outcome(from_dict, raw, "slurm"))


def outcome(make, *args) -> str:
    """What ``make(*args)`` returns, or the error a user would read."""
    try:
        return make(*args)
    except SystemExit as stop:
        return f"exit {stop.code}"
    except Exception as error:  # noqa: BLE001 - the error's text is the snapshot
        return f"{type(error).__name__}: {error}"


def helps(out: Path) -> None:
    from hpcbench.cli.main import build_parser

    parser = build_parser()
    write(out, "help/hpcbench", parser.format_help())
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sorted(sub.choices.items()):
        write(out, f"help/hpcbench-{name}", command.format_help())
    for module in ("hpcbench.train", "hpcbench.predict", "hpcbench.scaling", "hpcbench.energy"):
        done = subprocess.run(
            [sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True, text=True
        )
        write(out, f"help/{module}", done.stdout + done.stderr)


TIMES = re.compile(
    r"(time|seconds|_s\b|_at\b|started|ended|date|host|pid|duration|rate|"
    r"per_s|throughput|wall|elapsed|load|energy|power|joules|^start$|^end$|_ms$|^git$)",
    re.I,
)


def masked(value, key: str = ""):
    if isinstance(value, dict):
        return {k: masked(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v, key) for v in value]
    if isinstance(value, float) and TIMES.search(key):
        return "<time>"
    if isinstance(value, str) and TIMES.search(key):
        return "<text>"
    return value


#: a report's words that follow the machine's speed and load, not the code
TIMING_WORDS = re.compile(r"\b(faster|slower)\b")
LOADED = "other work shared this machine"


def timing_free(report: str) -> str:
    """A report with its numbers, its faster/slower and its machine-load notes masked."""
    kept = "".join(line for line in report.splitlines(keepends=True) if LOADED not in line)
    kept = re.sub(r"\n{3,}", "\n\n", kept)
    return TIMING_WORDS.sub("<faster|slower>", re.sub(r"\d+(\.\d+)?", "N", kept))


def one_run(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        train = [
            sys.executable,
            "-m",
            "hpcbench.train",
            "--strategy",
            "single",
            "--epochs",
            "2",
            "--output-dir",
            str(run),
            "--seed",
            "3",
            "--max-steps",
            "6",
        ]
        done = subprocess.run(train, cwd=ROOT, capture_output=True, text=True)
        write(
            out, "run/exit", f"{done.returncode}\n{done.stderr[-2000:] if done.returncode else ''}"
        )
        for metrics in sorted(run.rglob("metrics.json")):
            doc = json.loads(metrics.read_text())
            text = json.dumps(masked(doc), indent=1, sort_keys=True)
            write(out, f"run/{metrics.relative_to(run)}", text.replace(tmp, "<tmp>"))
        for csv in sorted(run.rglob("epochs.csv")):
            rows = csv.read_text().splitlines()
            write(out, f"run/{csv.relative_to(run)}", "\n".join(rows[:1]) + f"\n{len(rows)} rows\n")
        results = Path(tmp) / "bench"
        bench = [
            sys.executable,
            "-m",
            "hpcbench",
            "bench",
            "--configs",
            "single,ddp:2",
            "--repetitions",
            "1",
            "--scheduler",
            "local",
            "--results",
            str(results),
            "--no-history",
            "--",
            "--epochs",
            "1",
            "--max-steps",
            "4",
            "--seed",
            "3",
        ]
        env = os.environ | {
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
        }
        done = subprocess.run(bench, cwd=tmp, capture_output=True, text=True, env=env)
        write(
            out,
            "bench/exit",
            f"{done.returncode}\n{done.stderr[-2000:] if done.returncode else ''}",
        )
        report = subprocess.run(
            [sys.executable, "-m", "hpcbench", "report", str(results)],
            cwd=tmp,
            capture_output=True,
            text=True,
        )
        for md in sorted(results.rglob("report.md")):
            write(
                out,
                f"bench/{md.relative_to(results)}",
                timing_free(md.read_text().replace(tmp, "<tmp>")),
            )
        text = (report.stdout + report.stderr).replace(tmp, "<tmp>")
        write(out, "bench/report-output", re.sub(r"\d+(\.\d+)?", "N", text))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--no-run", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with contextlib.redirect_stderr(io.StringIO()):
        scripts(args.out)
    helps(args.out)
    if not args.no_run:
        one_run(args.out)
    print(f"snapshot in {args.out}: {sum(1 for p in args.out.rglob('*') if p.is_file())} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
