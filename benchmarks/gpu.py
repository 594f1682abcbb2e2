"""Everything GPU in one command: on a machine with a GPU, every GPU path of hpcbench and its
GPU-sensitive tests, each step with its own time limit (a failed step is logged and the next one
runs), in under 8 minutes; one JSON of the figures (``gpu.json``), the log and the bench report.

GPU machines are scarce and often lent for minutes: whoever gets one measures everything at once.
The machine needs torch, torchvision, h5py, matplotlib, nvidia-ml-py and mpi4py (and pytest with
pytest-xdist for the tests); MPICH, submitit and hpcbench itself come as wheels, made here first:

    python benchmarks/gpu.py --prepare .whl          # on any machine with pip and the network
    python benchmarks/gpu.py --wheels .whl --out OUT  # on the GPU machine, from the repository

The wheels are installed with ``pip install --prefix`` into a private directory (``--prefix``,
default /tmp/hpcbench-gpu): MPICH's ``mpiexec`` and ``libmpi`` come from there (``PATH``,
``LD_LIBRARY_PATH``, wherever pip's scheme put them), and ``python`` there is a two-line wrapper
script around this interpreter (a symbolic link would lose a virtual environment's packages; the
local scheduler's job scripts call ``python``). The code measured is the installed wheel (made
from this checkout by ``--prepare``), never the checkout's folders: every step runs outside the
checkout, and the tests run from a copy of it without the package's folders. The machine's mpi4py must be built for an
MPI whose ``mpiexec`` is the one on ``PATH`` (MPICH's wheel, or the machine's own MPI: then leave
``mpich`` out of the wheels). ``--only NAME,NAME`` runs those steps (named as below and in
``log.txt``); ``--tests-matching EXPR`` narrows the tests (pytest's ``-k``); ``--device cpu
--quick`` rehearses the whole script on a CPU in a few minutes (figures meaningless there).

Steps and figures (ResNet-34 on the built-in 197×148 set, global batch 128, the reference
study's settings; samples/s of a run's second epoch):

- ``plain-*``: the peer, ``benchmarks/plain_loop.py`` (fp32, bf16, bf16 channels_last);
- ``trainer-*``: ``python -m hpcbench.train`` ``single`` in the same three settings, and fp32
  with ``--deterministic`` (its cost): each as a ratio of the plain loop;
- ``breakdown``: ``--step-breakdown`` (ms per part of a step);
- ``bench`` and ``report``: a matrix (1 GPU, 1 GPU in DDP, 1 GPU under MPI, with energy) through
  the local scheduler, and its report (ratios against 1 GPU; energy per kind of device);
- ``hybrid-mpi``, ``hybrid-ddp``: rank 0 on the GPU, rank 1 on the CPU, checkpoints on, a stop
  signal, then a resume to the end; the replicas' drift;
- ``predict-pipeline``, ``predict-single``: 4 ranks against one process, the plan's prediction
  against the measurement;
- ``fp16``, ``dp``, ``compile``: short runs of each;
- ``pytest-*``: the unit tests and the GPU-sensitive integration tests, against the installed
  wheel (the tests that read the checkout's own sources are left to CI).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PACKAGE_FOLDERS = (
    "hpcbench",
)  # the wheel's packages (templates and converters inside), in the checkout
WHEELS_FROM_PYPI = ("mpich", "submitit", "cloudpickle")
TESTS = (
    "tests/integration/test_trainer.py",
    "tests/integration/test_energy_trainer.py",
    "tests/integration/test_checkpoint_resume.py",
    "tests/integration/test_replicas.py",
    "tests/integration/test_trainer_options.py",
    "tests/integration/test_predict.py",
    "tests/integration/test_launch_mpi.py",
    "tests/integration/test_scaling.py",
)


# ---- wheels ------------------------------------------------------------------------------------
def prepare(dest: Path, python_version: str) -> None:
    """hpcbench's wheel and those of the packages a GPU image lacks, for ``python_version``."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tree = source_tree(Path(tmp))
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dest), str(tree)],
            check=True,
        )
    platforms = [f"--platform=manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28, 31, 34, 35, 39)] + [
        "--platform=manylinux2014_x86_64",
        "--platform=any",
    ]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "--only-binary=:all:",
         "--python-version", python_version, "--implementation", "cp", *platforms,
         "-d", str(dest), *WHEELS_FROM_PYPI],
        check=True,
    )  # fmt: skip
    print("\n".join(sorted(p.name for p in dest.glob("*.whl"))))


def install(wheels: Path | None, prefix: Path) -> dict[str, str]:
    """Install the wheels (if any) under ``prefix``; the environment that finds them (their
    directories first on ``PYTHONPATH``), and ``python`` a wrapper script around this
    interpreter."""
    found = sorted(str(p) for p in wheels.glob("*.whl")) if wheels else []
    if found:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
             "--no-compile", "--no-cache-dir", "--upgrade", "--prefix", str(prefix), *found],
            check=True,
        )  # fmt: skip
    # pip's scheme decides the layout: prefix/lib/pythonX.Y/site-packages, or on Debian's
    # Python prefix/local/lib/pythonX.Y/dist-packages and prefix/local/bin
    sites = sorted(str(d) for d in prefix.glob("**/*-packages") if d.is_dir())
    bins = [str(prefix / "bin"), *(str(d) for d in prefix.glob("local/bin") if d.is_dir())]
    libs = [str(d) for d in (prefix / "lib", prefix / "local" / "lib") if d.is_dir()]
    (prefix / "bin").mkdir(parents=True, exist_ok=True)
    wrapper = prefix / "bin" / "python"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    env = dict(os.environ)

    def first(var: str, paths: list[str]) -> None:
        env[var] = os.pathsep.join([*paths, *filter(None, [env.get(var, "")])])

    first("PYTHONPATH", sites)
    first("PATH", bins)
    first("LD_LIBRARY_PATH", libs)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("HPCBENCH_STATE_DIR", str(prefix / "state"))
    return env


def source_digest(files: dict[str, bytes]) -> str:
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name] + b"\0")
    return digest.hexdigest()[:16]


def not_this_checkout(env: dict[str, str]) -> str:
    """'' when the installed package holds exactly this checkout's modules and templates, else
    the two digests (a wheel made from an older checkout would be measured silently)."""
    ours: dict[str, bytes] = {}
    for p in (REPO / "hpcbench").rglob("*"):
        if p.suffix in (".py", ".j2") and "__pycache__" not in p.parts:
            ours[p.relative_to(REPO / "hpcbench").as_posix()] = p.read_bytes()
    probe = (
        "import hashlib, json, pathlib, hpcbench; root = pathlib.Path(hpcbench.__file__).parent; "
        "print(json.dumps({p.relative_to(root).as_posix(): p.read_bytes().hex() "
        "for p in root.rglob('*') if p.suffix in ('.py', '.j2') and '__pycache__' not in p.parts}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                         cwd=tempfile.gettempdir())  # fmt: skip
    if out.returncode != 0:
        return f"hpcbench does not import: {out.stderr.strip().splitlines()[-1:]}"
    theirs = {k: bytes.fromhex(v) for k, v in json.loads(out.stdout).items()}
    mine, installed = source_digest(ours), source_digest(theirs)
    return "" if mine == installed else f"checkout {mine}, installed {installed}"


def source_tree(dest: Path) -> Path:
    """The files a wheel is built from, copied into ``dest`` without any build output of the
    checkout (a stale ``build/`` would ship modules that no longer exist)."""
    for name in PACKAGE_FOLDERS:
        shutil.copytree(REPO / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, dest / name)
    return dest


def checkout_without_package(dest: Path) -> Path:
    """A copy of this checkout without the package's folders (:data:`PACKAGE_FOLDERS`), for the
    tests: run from it, they import the installed wheel."""
    skip = {*PACKAGE_FOLDERS, ".git", ".venv", "build", ".whl"}
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for item in REPO.iterdir():
        if item.name in skip or item.name.endswith(".egg-info"):
            continue
        if item.is_dir():
            shutil.copytree(item, dest / item.name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
        else:
            shutil.copy2(item, dest / item.name)
    return dest


# ---- steps -------------------------------------------------------------------------------------
class Runner:
    """Runs the steps within the budget, logging each; keeps the figures."""

    def __init__(self, out: Path, env: dict[str, str], budget: float, only: set[str]):
        self.out, self.env, self.budget, self.only = out, env, budget, only
        self.t0 = time.monotonic()
        self.log = (out / "log.txt").open("a", encoding="utf-8")
        self.steps: list[dict[str, Any]] = []
        self.figures: dict[str, Any] = {}

    def say(self, text: str) -> None:
        line = f"[{time.monotonic() - self.t0:5.0f}s] {text}"
        print(line, flush=True)
        self.log.write(line + "\n")
        self.log.flush()

    def step(
        self, name: str, limit: float, cmd: list[str], cwd: Path, extra: dict | None = None
    ) -> int | None:
        if self.only and name not in self.only:
            return None
        left = self.budget - (time.monotonic() - self.t0)
        if left < 15:
            self.say(f"SKIP {name} (budget)")
            self.steps.append({"step": name, "rc": None, "s": 0, "skipped": "budget"})
            return None
        limit = min(limit, left)
        self.say(f"BEGIN {name} (limit {limit:.0f}s): {' '.join(cmd)}")
        s = time.monotonic()
        try:
            r = subprocess.run(cmd, cwd=cwd, env={**self.env, **(extra or {})}, stdout=self.log, stderr=subprocess.STDOUT,
                               timeout=limit, stdin=subprocess.DEVNULL)  # fmt: skip
            rc = r.returncode
        except subprocess.TimeoutExpired:
            rc = 124
        took = time.monotonic() - s
        self.say(f"END {name} rc={rc} {took:.0f}s")
        self.steps.append({"step": name, "rc": rc, "s": round(took, 1)})
        return rc

    def note(self, key: str, value: Any) -> None:
        self.figures[key] = value


def _metrics(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((run_dir / "metrics.json").read_text())
    except (OSError, ValueError):
        return None


def _epoch2(run_dir: Path) -> float | None:
    m = _metrics(run_dir)
    if not m or not m.get("epochs"):
        return None
    return m["epochs"][-1]["samples_per_s"]


def _telemetry_and_trace(run_dir: Path) -> dict[str, Any]:
    """The GPU run's last telemetry record (NVML's utilisation and memory readable?) and its
    trace summary (the CUDA activity recorded?)."""
    found: dict[str, Any] = {}
    try:
        lines = (run_dir / "telemetry" / "rank-0.jsonl").read_text().splitlines()
        found["last_record"] = json.loads(lines[-1]) if lines else None
        found["records"] = len(lines)
    except (OSError, ValueError) as err:
        found["telemetry_error"] = repr(err)
    try:
        found["trace"] = json.loads((run_dir / "traces" / "rank-0.summary.json").read_text())
    except (OSError, ValueError) as err:
        found["trace_error"] = repr(err)
    return found


def _last_compute(run_dir: Path, rank: int) -> float | None:
    try:
        lines = (run_dir / "telemetry" / f"rank-{rank}.jsonl").read_text().splitlines()
        return json.loads(lines[-1]).get("compute_s") if lines else None
    except (OSError, ValueError):
        return None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def _plain(out: Path, name: str) -> float | None:
    try:
        return json.loads((out / f"{name}.json").read_text())["samples_per_s"]
    except (OSError, ValueError, KeyError):
        return None


MATRIX = """\
# The reference study's matrix, shrunk to one GPU and a few minutes (written by benchmarks/gpu.py)
name = "gpu"
repetitions = 1
energy_repetitions = 1
idle_seconds = 5
baseline_one_device = "1gpu"
trainer_args = {args}

[[config]]
name = "1gpu"
strategy = "single"
device = "{device}"

[[config]]
name = "1gpu-ddp"
strategy = "ddp"
device = "{device}"

[[config]]
name = "1gpu-mpi"
strategy = "mpi"
device = "{device}"
"""


def run_all(a: argparse.Namespace, runner: Runner) -> None:
    out, work = a.out, a.out / "work"
    work.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    data = work / "data" / "shapes"
    quick = a.quick
    model = "small_cnn" if quick else "resnet34"
    batch = "32" if quick else "128"
    steps = "8" if quick else "40"
    shape = "1,148,197"
    ta = ["--model", model, "--global-batch-size", batch, "--lr", "0.05", "--momentum", "0",
          "--schedule", "none", "--progress", "lines", "--data", str(data)]  # fmt: skip
    dev = ["--device", a.device]

    def train(name: str, limit: float, *extra: str, launcher: list[str] | None = None) -> Path:
        run_dir = work / "r" / name
        runner.step(name, limit, [*(launcher or [py]), "-m", "hpcbench.train", *ta,
                                  "--output-dir", str(run_dir), *extra], work)  # fmt: skip
        return run_dir

    runner.step("prep", 120, [py, "-m", "hpcbench", "prep", "synthetic", str(data)], work)
    # the peer and the trainer, side by side
    settings = {"fp32": [], "bf16": ["--precision", "bf16"],
                "bf16-cl": ["--precision", "bf16", "--channels-last"]}  # fmt: skip
    for name, extra in settings.items():
        plain_out = out / f"plain-{name}.json"
        runner.step(f"plain-{name}", 60, ["sh", "-c", " ".join(
            [py, str(REPO / "benchmarks" / "plain_loop.py"), "--model", model, "--shape", shape,
             "--batch", batch, "--steps", steps, "--device", a.device, *extra, ">", str(plain_out)]
        )], work)  # fmt: skip
        run_dir = train(f"trainer-{name}", 90, "--no-checkpoint", "--epochs", "2",
                        "--max-steps", steps, *dev, *extra)  # fmt: skip
        t, p = _epoch2(run_dir), _plain(out, f"plain-{name}")
        runner.note(f"trainer_{name}", {"trainer": t, "plain": p, "ratio": _ratio(t, p)})
    run_dir = train("trainer-deterministic", 90, "--no-checkpoint", "--epochs", "2",
                    "--max-steps", steps, "--deterministic", *dev)  # fmt: skip
    runner.note("deterministic_cost", {
        "deterministic": _epoch2(run_dir),
        "ratio_to_default": _ratio(_epoch2(run_dir), _epoch2(work / "r" / "trainer-fp32")),
    })  # fmt: skip
    run_dir = train("breakdown", 60, "--no-checkpoint", "--epochs", "1", "--max-steps", "30",
                    "--step-breakdown", "--telemetry", "0.5", "--trace-steps", "10:12",
                    *dev)  # fmt: skip
    m = _metrics(run_dir)
    runner.note("step_breakdown_ms", m["epochs"][-1].get("step_breakdown_ms") if m else None)
    runner.note("telemetry_and_trace", _telemetry_and_trace(run_dir))

    # the namesake: a matrix through the local scheduler, with energy, and its report
    matrix = out / "matrix.toml"
    args = [*ta[:-2], "--epochs", "1", "--max-steps", "8" if quick else "30"]
    matrix.write_text(MATRIX.format(args=json.dumps(args), device=a.device))
    bench = work / "bench"
    runner.step("bench", 200, [py, "-m", "hpcbench", "bench", str(matrix), "--results", str(bench),
                               "--scheduler", "local", "--", "--data", str(data)], work)  # fmt: skip
    runner.step("report", 90, [py, "-m", "hpcbench", "report", str(bench), "--output",
                               str(bench / "report")], work)  # fmt: skip
    try:
        sys.path[:0] = runner.env["PYTHONPATH"].split(os.pathsep)  # the installed wheel
        from hpcbench.bench.analysing.analysis import analyse
        from hpcbench.bench.reading.results_reader import load_results

        analysis = analyse(load_results(bench))
        runner.note("bench", {
            "sentences": analysis["sentences"],
            "speedup_vs_1gpu": {c["name"]: (c["speedup_vs_one_device"] or {}).get("value")
                                for c in analysis["configs"]},
            "energy": {c["name"]: {"available": c["energy"]["available"],
                                   "partial": c["energy"].get("partial"),
                                   "by_kind": c["energy"].get("by_kind")}
                       for c in analysis["configs"]},
            "comm_s": {c["name"]: (c["time"].get("comm") or {}).get("median")
                       for c in analysis["configs"]},
        })  # fmt: skip
    except Exception as err:  # noqa: BLE001 - the figures of a failed bench are what they are
        runner.note("bench", {"error": repr(err)})
    for f in (bench / "report").glob("report.*"):
        shutil.copy(f, out / f.name)

    # the hybrid: rank 0 on the GPU, rank 1 on the CPU, checkpoints on: stopped by a signal at
    # step 11 (a checkpoint), then resumed to the end (small_cnn: the CPU rank also evaluates its
    # half of the validation and test sets, which for ResNet-34 would take minutes)
    hybrid = ["--epochs", "2", "--max-steps", "10", "--checkpoint-every", "4",
              "--rank-weights", "40,1", "--resync-every", "5", "--telemetry", "0.2"]  # fmt: skip
    for strategy, launcher in (
        ("mpi", ["mpiexec", "-n", "2", py]),
        ("ddp", [py, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]),
    ):
        run_dir = work / "r" / f"hybrid-{strategy}"
        cmd = [*launcher, "-m", "hpcbench.train", *ta, "--strategy", strategy, *hybrid,
               "--model", "small_cnn", "--output-dir", str(run_dir)]  # fmt: skip
        stopped = runner.step(f"hybrid-{strategy}", 120, cmd, work,
                              {"HPCBENCH_FAIL_AT": "0:11:stop"})  # fmt: skip
        resumed = runner.step(f"hybrid-{strategy}-resume", 120, [*cmd, "--resume", "auto"], work)
        m = _metrics(run_dir)
        runner.note(f"hybrid_{strategy}", {
            "stopped_rc": stopped, "resumed_rc": resumed, "completed": m is not None,
            # the GPU rank's compute from device events under ddp, the CPU rank's from its clock
            "telemetry_compute_s": {r: _last_compute(run_dir, r) for r in (0, 1)},
            "replicas": m.get("replicas") if m else None,
            "test_accuracy": (m.get("test") or {}).get("accuracy") if m else None,
        })  # fmt: skip

    # inference: the pipeline against one process, on the fp32 model trained with checkpoints
    model_dir = train("trainer-ckpt", 90, "--epochs", "1", "--max-steps", "20", *dev)
    pred = ["-m", "hpcbench.predict", "--checkpoint", str(model_dir), "--input", str(data),
            "--split", "test", "--device", a.device]  # fmt: skip
    runner.step("predict-pipeline", 90, ["mpiexec", "-n", "4", py, *pred, "--roles", "auto",
                                         "--output-dir", str(work / "pred4")], work)  # fmt: skip
    runner.step("predict-single", 60, [py, *pred, "--output-dir", str(work / "pred1")], work)
    docs = {}
    for name in ("pred4", "pred1"):
        try:
            docs[name] = json.loads((work / name / "predict.json").read_text())
        except (OSError, ValueError):
            docs[name] = None
    if docs["pred4"] and docs["pred1"]:
        four, one = docs["pred4"], docs["pred1"]
        runner.note("predict", {
            "pipeline_items_per_s": four["measured"]["items_per_s"],
            "single_items_per_s": one["measured"]["items_per_s"],
            "ratio": _ratio(four["measured"]["items_per_s"], one["measured"]["items_per_s"]),
            "mode": four["mode"], "plan": four.get("plan"),
            "measured_vs_predicted": four["measured"].get("vs_predicted"),
            "device_peak_mb": [r.get("device_peak_mb") for r in four["ranks"]],
        })  # fmt: skip

    # the other precisions and strategies, briefly
    short = ["--no-checkpoint", "--epochs", "1", "--max-steps", "20"]
    train("fp16", 60, *short, *dev, "--precision", "fp16")
    train("dp", 60, *short, "--strategy", "dp")
    run_dir = train(
        "compile",
        120,
        *short,
        *dev,
        "--precision",
        "bf16",
        "--compile",
        "default",
        "--model",
        "small_cnn",
    )  # compiling ResNet-34 alone takes minutes
    runner.note("compile", {"completed": _metrics(run_dir) is not None})
    for name in ("fp16", "dp"):
        runner.note(name, {"completed": _metrics(work / "r" / name) is not None})

    # the project's tests on this machine (CI never has a GPU)
    if not a.no_tests:
        tests_tree = checkout_without_package(work / "checkout")
        for name, limit, paths in (
            ("pytest-integration", 280, list(TESTS)),
            # the tests of the checkout's own sources (structure, layout, packaging) stay in CI
            (
                "pytest-unit",
                90,
                [
                    "tests/unit",
                    "--ignore=tests/unit/test_structure.py",
                    "--ignore=tests/unit/test_launch_layout.py",
                    "--ignore=tests/unit/test_packaging.py",
                ],
            ),
        ):
            log = out / f"{name}.txt"
            workers = ["-n", str(a.test_workers)] if importlib.util.find_spec("xdist") else []
            if a.tests_matching:
                workers += ["-k", shlex.quote(a.tests_matching)]
            rc = runner.step(
                name,
                limit,
                [
                    "sh",
                    "-c",
                    " ".join(
                        [
                            py,
                            "-m",
                            "pytest",
                            "-v",
                            "-rfE",
                            *workers,
                            "-p",
                            "no:cacheprovider",
                            *paths,
                            ">",
                            str(log),
                            "2>&1",
                        ]
                    ),
                ],
                tests_tree,
            )  # fmt: skip (-v: each test named as it ends)
            if rc is not None and log.exists():
                text = log.read_text(errors="replace")
                tail = [x for x in text.splitlines() if re.search(r"passed|failed|error", x)]
                runner.note(name, {"rc": rc, "summary": tail[-1] if tail else None,
                                   "failed": sorted(set(re.findall(r"FAILED (tests/\S+)", text)))})  # fmt: skip


def no_gpu() -> str:
    """Why no GPU can be used here ('' when one can): CUDA_VISIBLE_DEVICES hides them all, or
    nvidia-smi is missing or lists none. Checked before the wheels are installed."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1", "NoDevFiles"):
        return f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU"
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        return "no nvidia-smi on PATH"
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"nvidia-smi -L failed: {err}"
    if listed.returncode != 0 or "GPU" not in listed.stdout:
        return f"nvidia-smi -L lists no GPU: {(listed.stderr or listed.stdout).strip()[:200]}"
    return ""


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=textwrap.dedent(__doc__.split("\n\n", 1)[1]),
    )
    ap.add_argument("--prepare", type=Path, metavar="DIR", help="make the wheels into DIR, stop")
    ap.add_argument("--python-version", default="3.12", help="of the GPU machine (--prepare)")
    ap.add_argument("--wheels", type=Path, metavar="DIR", help="the wheels --prepare made")
    ap.add_argument("--prefix", type=Path, default=Path("/tmp/hpcbench-gpu"))
    ap.add_argument("--out", type=Path, default=Path("gpu-out"))
    ap.add_argument("--budget", type=float, default=470, help="seconds for all the steps")
    ap.add_argument("--only", default="", help="comma-separated step names")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--quick", action="store_true", help="a small model and few steps")
    ap.add_argument("--no-tests", action="store_true")
    ap.add_argument("--test-workers", type=int, default=12)
    ap.add_argument(
        "--tests-matching", metavar="EXPR", default="", help="pytest's -k for the tests"
    )
    a = ap.parse_args()
    if a.prepare:
        prepare(a.prepare, a.python_version)
        return
    if a.device == "cuda" and (why := no_gpu()):
        sys.exit(f"benchmarks/gpu.py: no GPU here ({why}): run it on a GPU node, or rehearse it "
                 "on this machine with --device cpu")  # fmt: skip
    a.out = a.out.resolve()
    a.out.mkdir(parents=True, exist_ok=True)
    env = install(a.wheels, a.prefix)
    if stale := not_this_checkout(env):
        sys.exit(f"benchmarks/gpu.py: the installed hpcbench is not this checkout's ({stale}); "
                 "make the wheels again with --prepare")  # fmt: skip
    runner = Runner(a.out, env, a.budget, {s for s in a.only.split(",") if s})
    info = subprocess.run(
        [sys.executable, "-c", "import torch, json; print(json.dumps({'torch': torch.__version__,"
         " 'cuda': torch.version.cuda, 'gpus': torch.cuda.device_count(), 'gpu':"
         " torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}))"],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    runner.note("machine", json.loads(info.stdout) if info.returncode == 0 else info.stderr)
    try:
        run_all(a, runner)
    finally:
        doc = {"steps": runner.steps, "figures": runner.figures,
               "seconds": round(time.monotonic() - runner.t0, 1)}  # fmt: skip
        (a.out / "gpu.json").write_text(json.dumps(doc, indent=1, default=str))
        runner.say(f"DONE: {a.out / 'gpu.json'}")


if __name__ == "__main__":
    main()
