"""The peer of the trainer's ``single``: a plain PyTorch training loop on the same model
(:func:`hpcbench.train.models.build_model`), its batches already on the device (uint8, normalised
there as the trainer does), fused SGD, no checks and one timer. Prints one JSON line: samples/s
over ``--steps`` steps after ``--warmup`` steps. What the model's compute alone allows on this
device; ``benchmarks/trainer_overhead.py`` divides the trainer's samples/s by it.

    python benchmarks/plain_loop.py --model resnet18 --shape 1,48,64 --batch 32 [--device cuda]
        [--precision bf16] [--channels-last]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from hpcbench.train.models import build_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--shape", default="1,48,64", help="C,H,W")
    ap.add_argument("--classes", type=int, default=9)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--channels-last", action="store_true")
    a = ap.parse_args()
    shape = tuple(int(v) for v in a.shape.split(","))
    dev = torch.device(a.device)
    torch.manual_seed(0)
    model = build_model(a.model, shape, a.classes).to(dev)
    if a.channels_last:
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum, fused=True)
    crit = torch.nn.CrossEntropyLoss()
    xs = [torch.randint(0, 256, (a.batch, *shape), dtype=torch.uint8, device=dev) for _ in range(4)]
    ys = [torch.randint(0, a.classes, (a.batch,), device=dev) for _ in range(4)]
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.precision)
    scaler = torch.amp.GradScaler(dev.type, enabled=a.precision == "fp16")
    model.train()

    def step(i: int) -> None:
        x = xs[i % 4].float().mul_(1 / 255).sub_(0.5)
        if a.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = crit(model(x), ys[i % 4])
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    for i in range(a.warmup):
        step(i)
    sync()
    t0 = time.perf_counter()
    for i in range(a.steps):
        step(i)
    sync()
    dt = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "peer": "plain_loop",
                "model": a.model,
                "device": a.device,
                "precision": a.precision,
                "channels_last": a.channels_last,
                "batch": a.batch,
                "samples_per_s": a.batch * a.steps / dt,
                "step_ms": 1000 * dt / a.steps,
            }
        )
    )


if __name__ == "__main__":
    main()
