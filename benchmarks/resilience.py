"""What surviving costs: the per-step stop agreement and the checkpoints, against a peer measured
in the same invocation.

The trainer (mpi strategy, 2 ranks × 1 thread under mpiexec, a small global batch where a
per-step collective matters most) runs interleaved ``--repeats`` times as

- ``baseline``: an hpcbench checkout given with ``--baseline DIR`` (e.g. a ``git worktree`` of a
  commit before checkpoints existed), when given: its ``hpcbench/`` first on ``PYTHONPATH`` (the
  trainer imports neither ``hpcbench.data_prep`` nor ``hpcbench.templates``, which an older uninstalled
  tree does not map);
- ``no-checkpoint``: this tree with ``--no-checkpoint`` (only the per-step agreement: one
  all-reduce of two numbers after each step);
- ``epoch-end``: this tree's default (a checkpoint at the end of each epoch, outside the train
  phase);
- ``every-4``: a checkpoint every 4 steps.

It prints the median train-phase samples/s of the second epoch, each variant's ratio to the
baseline (or to ``no-checkpoint``), and what one checkpoint costs in training steps
(``checkpoints.mean_s`` ÷ the time of one step), for each ``--model``.

    python benchmarks/resilience.py [--baseline /tmp/hpcbench-before] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def run(tree: Path, data: Path, out: Path, model: str, steps: int, extra: list[str]) -> dict:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(tree),
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"],
    }
    cmd = ["mpiexec", "-n", "2", sys.executable, "-m", "hpcbench.train", "--strategy", "mpi"]
    cmd += ["--data", str(data), "--model", model, "--epochs", "2", "--max-steps", str(steps)]
    cmd += ["--global-batch-size", "16", "--progress", "none", "--output-dir", str(out), *extra]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tree, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}")
    return json.loads((out / "metrics.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="an earlier hpcbench checkout")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", default="small_cnn,resnet18")
    parser.add_argument("--steps", type=int, default=24)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from hpcbench.data_prep import ConvertOptions, convert, synthetic

    variants: dict[str, tuple[Path, list[str]]] = {}
    if args.baseline:
        variants["baseline"] = (args.baseline.resolve(), [])
    variants["no-checkpoint"] = (REPO, ["--no-checkpoint"])
    variants["epoch-end"] = (REPO, [])
    variants["every-4"] = (REPO, ["--checkpoint-every", "4"])
    peer = "baseline" if args.baseline else "no-checkpoint"
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "shapes"
        convert(
            synthetic(900, 9), data, ConvertOptions(size=(32, 32), grayscale=True, progress=False)
        )
        for model in args.models.split(","):
            rates: dict[str, list[float]] = {name: [] for name in variants}
            cost: list[float] = []
            for rep in range(args.repeats):
                for name, (tree, extra) in variants.items():
                    out = Path(tmp) / f"{model}-{name}-{rep}"
                    m = run(tree, data, out, model, args.steps, extra)
                    rates[name].append(m["epochs"][-1]["samples_per_s"])
                    if name == "every-4":
                        step_s = m["epochs"][-1]["train_time_s"] / m["run"]["steps_per_epoch"]
                        cost.append(m["checkpoints"]["mean_s"] / step_s)
            base = statistics.median(rates[peer])
            print(f"{model}: mpi, 2 ranks, global batch 16, {args.repeats} repeats (medians)")
            for name in variants:
                med = statistics.median(rates[name])
                print(f"  {name:14s} {med:8.1f} samples/s   ratio to {peer}: {med / base:.3f}")
            print(f"  one checkpoint costs {statistics.median(cost):.1f} training steps")


if __name__ == "__main__":
    main()
