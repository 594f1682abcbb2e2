"""What one short ``python -m hpcbench.train`` process costs, against what any PyTorch training
script pays before its first step, measured in the same run.

Every launch of the trainer (a test, a smoke job, a sweep task, each rank of each) starts a Python
process that imports torch; the first optimizer also imports ``torch._dynamo`` (torch.optim's
``step()`` does, compiled or not). The cases, each a whole process, timed interleaved
(``--repeats`` rounds) so that the machine's noise falls on all alike; CPU seconds (user + sys,
the process and what it waited for) and wall seconds, medians:

- ``import torch``: the floor of any process that uses torch;
- ``torch + one SGD step``: the same plus a tiny model, one optimizer step (what a plain training
  script pays before it trains);
- ``the same, fast exit``: the same script ending with :func:`hpcbench.fast_exit.exit_now`, as
  the trainer's and the predictor's processes end (no interpreter teardown);
- ``hpcbench.train, 2 steps``: the trainer on a 90-sample generated set, ``--max-steps 2``,
  without checkpoints (set-up, two steps, validation and test, its documents): it compiles
  nothing, so it leaves ``torch._dynamo`` unloaded (:mod:`hpcbench.train.eager_dynamo`);
- ``the same, compiler loaded``: the same trainer with ``HPCBENCH_DEFER_DYNAMO=0``, loading
  ``torch._dynamo`` as PyTorch does.

Prints the medians and the ratios to ``torch + one SGD step`` (which ends as Python does).

    python benchmarks/trainer_startup.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SGD_STEP = (
    "import torch\n"
    "m = torch.nn.Linear(8, 2)\n"
    "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
    "m(torch.randn(4, 8)).sum().backward()\n"
    "opt.step()\n"
)
FAST_EXIT = "from hpcbench.fast_exit import exit_now\nexit_now(0)\n"
TRAIN_ARGS = (
    "--model mlp --epochs 1 --max-steps 2 --global-batch-size 8 --no-checkpoint --progress none"
)


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def time_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    cpu, wall = children_cpu(), time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    return children_cpu() - cpu, time.perf_counter() - wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # one thread each, as the tests run them
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "shapes"
        subprocess.run(
            [sys.executable, "-m", "hpcbench", "prep", "synthetic", str(data), "--samples", "90",
             "--size", "16x12"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        train = [
            *(sys.executable, "-m", "hpcbench.train", "--data", str(data)),
            *TRAIN_ARGS.split(),
            *("--output-dir", str(Path(tmp) / "run")),
        ]
        cases = {  # name: the command, and what it adds to the environment
            "import torch": ([sys.executable, "-c", "import torch"], {}),
            "torch + one SGD step": ([sys.executable, "-c", SGD_STEP], {}),
            "the same, fast exit": ([sys.executable, "-c", SGD_STEP + FAST_EXIT], {}),
            "hpcbench.train, 2 steps": (train, {}),
            "the same, compiler loaded": (train, {"HPCBENCH_DEFER_DYNAMO": "0"}),
        }
        seen: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
        for _ in range(a.repeats):
            for name, (argv, extra) in cases.items():
                seen[name].append(time_once(argv, {**env, **extra}))
    cpu = {name: statistics.median(c for c, _ in runs) for name, runs in seen.items()}
    wall = {name: statistics.median(w for _, w in runs) for name, runs in seen.items()}
    peer = "torch + one SGD step"
    print(f"{'case':<26}{'CPU s':>8}{'wall s':>8}{'CPU ÷ peer':>12}")
    for name in cases:
        print(f"{name:<26}{cpu[name]:>8.2f}{wall[name]:>8.2f}{cpu[name] / cpu[peer]:>12.2f}")
    print(
        f"torch.optim's first step costs {cpu[peer] - cpu['import torch']:.2f} s of CPU beyond "
        f"import torch; leaving without the interpreter's teardown saves "
        f"{cpu[peer] - cpu['the same, fast exit']:.2f} s; the trainer, which leaves so, costs "
        f"{cpu['hpcbench.train, 2 steps'] - cpu['the same, fast exit']:+.2f} s against a plain "
        f"script's first step that does too; leaving torch._dynamo unloaded saves it "
        f"{cpu['the same, compiler loaded'] - cpu['hpcbench.train, 2 steps']:.2f} s "
        f"({a.repeats} rounds, medians)"
    )


if __name__ == "__main__":
    main()
