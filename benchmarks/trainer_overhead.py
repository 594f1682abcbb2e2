"""The trainer's own cost: ``python -m hpcbench.train`` (``single``) against a plain PyTorch loop
on the same model (``benchmarks/plain_loop.py``: batches already on the device, fused SGD),
measured side by side, interleaved, ``--repeats`` times, in one invocation.

The trainer trains two epochs of ``--steps`` steps on a generated set of ``--shape`` images
(``--no-checkpoint``); its second epoch's samples/s is kept (the first warms up). The plain loop
runs ``--steps`` steps after a warm-up on random uint8 batches of that shape. Prints the medians
and the ratio trainer ÷ plain loop for each precision asked (target on a GPU: ≥ 0.97). The
trainer runs with a telemetry record every ``--telemetry`` seconds (0.1: fifty times the
default rate) and again with telemetry off: their ratio is the telemetry's cost in the trainer.

    python benchmarks/trainer_overhead.py [--device cpu|cuda] [--model resnet18] [--shape 1,48,64]
        [--batch 32] [--steps 20] [--repeats 3] [--precisions fp32,bf16] [--channels-last]

On a GPU node, the reference study's settings: ``--device cuda --model resnet34 --shape
1,148,197 --batch 128 --steps 60``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import environment

HERE = Path(__file__).resolve().parent


def make_data(root: Path, shape: tuple[int, int, int], samples: int) -> Path:
    from hpcbench.data_prep import ConvertOptions, convert, synthetic

    out = root / "data"
    c, h, w = shape
    convert(
        synthetic(samples, 9),
        out,
        ConvertOptions(size=(w, h), grayscale=c == 1, progress=False),
    )
    return out


def run(cmd: list[str], a, what: str) -> subprocess.CompletedProcess:
    """Run one side (with --channels-last when asked); stop the benchmark if it fails."""
    if a.channels_last:
        cmd.append("--channels-last")
    r = subprocess.run(cmd, env=environment(), capture_output=True, text=True, timeout=1800)
    if r.returncode:
        sys.exit(f"{what} failed:\n{r.stdout}\n{r.stderr}")
    return r


def trainer(a, data: Path, out: Path, precision: str, telemetry: float) -> float:
    cmd = [
        sys.executable, "-m", "hpcbench.train", "--data", str(data), "--model", a.model,
        "--global-batch-size", str(a.batch), "--epochs", "2", "--max-steps", str(a.steps),
        "--no-checkpoint", "--progress", "none", "--precision", precision, "--device",
        a.device, "--lr", "0.05", "--momentum", "0", "--schedule", "none", "--val-every", "2",
        "--output-dir", str(out), "--telemetry", str(telemetry),
    ]  # fmt: skip
    run(cmd, a, "trainer")
    return json.loads((out / "metrics.json").read_text())["epochs"][1]["samples_per_s"]


def plain(a, precision: str) -> float:
    shape = ",".join(map(str, a.shape))
    cmd = [
        sys.executable, str(HERE / "plain_loop.py"), "--model", a.model, "--shape", shape,
        "--batch", str(a.batch), "--steps", str(a.steps), "--warmup", str(max(3, a.steps // 4)),
        "--device", a.device, "--precision", precision,
    ]  # fmt: skip
    r = run(cmd, a, "plain loop")
    return json.loads(r.stdout.strip().splitlines()[-1])["samples_per_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--shape", default="1,48,64", help="C,H,W of the generated images")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--precisions", default="fp32", help="comma-separated: fp32,bf16,fp16")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--telemetry", type=float, default=0.1, help="seconds between records")
    a = ap.parse_args()
    a.shape = tuple(int(v) for v in a.shape.split(","))
    figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = make_data(Path(tmp), a.shape, a.batch * a.steps + 400)
        for precision in a.precisions.split(","):
            runs: dict[str, list[float]] = {"trainer": [], "plain": [], "no_telemetry": []}
            for i in range(a.repeats):
                runs["plain"].append(plain(a, precision))
                out = Path(tmp) / f"r{precision}{i}"
                runs["trainer"].append(trainer(a, data, out, precision, a.telemetry))
                runs["no_telemetry"].append(trainer(a, data, out.with_name(out.name + "-off"),
                                                    precision, 0))  # fmt: skip
            t, p, off = (statistics.median(runs[k]) for k in ("trainer", "plain", "no_telemetry"))
            figures[precision] = {"trainer": t, "plain": p, "ratio": t / p, "runs": runs,
                                  "telemetry_ratio": t / off}  # fmt: skip
            print(
                f"{a.model} {precision}{' channels_last' if a.channels_last else ''} on {a.device}, "
                f"batch {a.batch}: trainer {t:,.1f} samples/s, plain loop {p:,.1f}: "
                f"trainer / plain = {t / p:.3f}; telemetry every {a.telemetry:g} s / off = "
                f"{t / off:.3f} ({off:,.1f} samples/s off) (median of {a.repeats})",
                flush=True,
            )
    if a.json:
        Path(a.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
