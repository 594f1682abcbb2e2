"""Parallel inference: the pipeline with ``--roles auto`` against plain data-parallel and the
single-process loop, measured in the same invocation, on JPEG files that need decoding and
resizing.

Set-up (not timed): the built-in shapes written as 640×480 JPEG folders (a training folder and
``--images`` test images), the training folder converted to a 64×64 RGB dataset, and a model
(``--model``) trained on it for one epoch. Then, ``--repeats`` times, interleaved:

- ``single``: ``python -m hpcbench.predict`` in one process (torch's default threads);
- ``data-parallel``: ``mpiexec -n RANKS … --mode data-parallel``;
- ``pipeline``: ``mpiexec -n RANKS … --roles auto``.

Each run reports images/s over its classification phase (after start-up, model loading and, for
the pipeline, calibration; the same window in every mode); the script prints the medians, each
mode's ratio to ``single``, the pipeline's ratio to data-parallel, the memory of all ranks
together (the sum of their peak resident sizes), and how the measured throughput compares with
the one ``--roles auto`` predicted. The files are read once before the first
round, so every round reads them from the page cache.

    python benchmarks/predict.py [--ranks 4] [--images 1500] [--repeats 3]
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


def env() -> dict[str, str]:
    return {
        **os.environ,
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"],
    }


def sh(cmd: list[str], cwd: Path) -> None:
    r = subprocess.run(cmd, env=env(), capture_output=True, text=True, cwd=cwd, timeout=3600)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}")


def predict(mode: str, ranks: int, work: Path, out: Path, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "hpcbench.predict", "--checkpoint", str(work / "model"),
           "--input", str(work / "test"), "--output-dir", str(out), "-q", *extra]  # fmt: skip
    if mode != "single":
        cmd = ["mpiexec", "-n", str(ranks), *cmd, "--mode", mode]
    sh(cmd, work)
    return json.loads((out / "predict.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--images", type=int, default=1500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default="small_cnn")
    parser.add_argument("--size", default="64x64", help="the model's input size")
    parser.add_argument("--work", type=Path, help="keep the images and model here")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from hpcbench.data_prep.synthetic import write_image_folder

    with tempfile.TemporaryDirectory(prefix="hpcbench-predict-") as tmp:
        work = args.work or Path(tmp)
        if not (work / "model").exists():
            print(f"writing {args.images} test and 540 training JPEGs (640x480) ...", flush=True)
            write_image_folder(work / "train-images", 540, size=(640, 480))
            write_image_folder(work / "test", args.images, size=(640, 480), first=1_000_000)
            sh([sys.executable, "-m", "hpcbench", "prep", "folder", str(work / "train-images"),
                str(work / "data"), "--size", args.size, "-q"], work)  # fmt: skip
            sh([sys.executable, "-m", "hpcbench.train", "--data", str(work / "data"), "--epochs",
                "1", "--model", args.model, "--progress", "none", "--output-dir",
                str(work / "model")], work)  # fmt: skip
        for path in (work / "test").rglob("*.jpg"):  # into the page cache
            path.read_bytes()
        runs: dict[str, list[dict]] = {"single": [], "data-parallel": [], "pipeline": []}
        for rep in range(args.repeats):
            for mode in runs:
                extra = ["--roles", "auto"] if mode == "pipeline" else []
                doc = predict(mode, args.ranks, work, work / f"out-{mode}-{rep}", extra)
                runs[mode].append(doc)
                print(f"  round {rep + 1} {mode:<14}{doc['measured']['items_per_s']:9.1f} images/s",
                      flush=True)  # fmt: skip
        rate = {m: statistics.median(d["measured"]["items_per_s"] for d in docs)
                for m, docs in runs.items()}  # fmt: skip
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        print(f"\n{args.images} JPEG 640x480 -> {args.size}, model {args.model}, {cores} core(s), "
              f"{args.ranks} ranks, median of {args.repeats}")  # fmt: skip
        memory = {m: statistics.median(sum(r["peak_rss_mb"] for r in d["ranks"]) for d in docs)
                  for m, docs in runs.items()}  # fmt: skip
        print(f"{'mode':<16}{'images/s':>10}{'vs single':>11}{'peak MB, all ranks':>20}")
        for mode, value in rate.items():
            print(f"{mode:<16}{value:>10.1f}{value / rate['single']:>10.2f}x{memory[mode]:>20.0f}")
        print(f"pipeline / data-parallel: {rate['pipeline'] / rate['data-parallel']:.2f}x")
        for doc in runs["pipeline"]:
            plan = doc["plan"]
            print(f"pipeline roles {plan['roles']}: predicted {plan['predicted_items_per_s']:.1f} "
                  f"images/s, measured {doc['measured']['items_per_s']:.1f} "
                  f"({doc['measured']['vs_predicted']:.2f}x of predicted)")  # fmt: skip


if __name__ == "__main__":
    main()
