"""Samples/s of the sharded reader against two peers over the same images, in one run.

The reader is timed twice: yielding normalised float32 (``normalize=True``: ``stored * scale +
shift`` with the manifest's train mean/std, what a model takes when the host normalises) and raw
uint8 (``normalize=False``: the stored bytes, what the trainer takes, normalising on the device).
Peers, all single-process (``num_workers=0``), batch 64, random order, page cache warm:

- torchvision ``ImageFolder`` over the same train images written as PNG files (decode per file,
  ``ToTensor`` to float32 0..1: what most users start from), against the float32 reader;
- a raw numpy memmap of the same uint8 array, read one sample at a time at random indices (the
  fastest per-sample access there is; the reader must not be slower), against the uint8 reader.

Each loader is timed for ``--repeats`` whole epochs, interleaved (reader, ImageFolder, memmap,
reader, …) so the machine's noise falls on all alike; medians and their ratios are printed.
Then, for W = 1, 2, 4, every rank's epoch is read once more and the bytes its process read
(``rchar`` in ``/proc/self/io``) are divided by the split's bytes ÷ W: the read amplification.

    python benchmarks/loader.py [--samples 9000] [--size 197x148] [--repeats 5] [--data DIR]

Targets: reader (float32) ≥ 30× ImageFolder, reader (uint8) ≥ 1.0× memmap, amplification ≤ 1.05.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from hpcbench.data import Manifest, ShardedDataset
from hpcbench.data.shards import OpenShard
from hpcbench.data_prep import ConvertOptions, convert, synthetic
from hpcbench.data_prep.convert import parse_size

BATCH = 64
FOLDER_TARGET = 30  # reader (float32) / ImageFolder


def rchar() -> int:
    with open("/proc/self/io") as fh:
        for line in fh:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/self/io")


def prepare(data: Path, samples: int, size: tuple[int, int]) -> tuple[Path, Path, Path]:
    """The sharded set, the same train images as PNG files, and as one .npy (made once)."""
    shards, pngs, npy = data / "shards", data / "png", data / "train.npy"
    if not (shards / "manifest.json").exists():
        print(
            f"generating {samples} synthetic samples of {size[0]}x{size[1]} into {shards} …",
            flush=True,
        )
        convert(
            synthetic(samples), shards, ConvertOptions(size=size, grayscale=True, progress=False)
        )
    m = Manifest.load(shards)
    if not npy.exists() or not pngs.exists():
        info = m.split("train")
        images, labels = [], []
        for s in info.shards:
            sh = OpenShard(m.shard_path(s), s, m.shape, m.dtype)
            buf = np.empty((s.samples, *m.shape), m.dtype)
            sh.read_rows(0, s.samples, buf)
            images.append(buf)
            labels.append(sh.labels)
            sh.close()
        arr, lab = np.concatenate(images), np.concatenate(labels)
        np.save(npy, arr)
        for name in m.classes:
            (pngs / name).mkdir(parents=True, exist_ok=True)
        for i, (img, y) in enumerate(zip(arr, lab, strict=True)):
            Image.fromarray(img[0]).save(pngs / m.classes[y] / f"{i:06d}.png")
    return shards, pngs, npy


def reader_epochs(shards: Path, normalize: bool) -> Callable[[int], int]:
    ds = ShardedDataset(
        shards, "train", batch_size=BATCH, rank=0, world_size=1, normalize=normalize
    )

    def run(epoch: int) -> int:
        ds.set_epoch(epoch)
        return sum(len(y) for _, y in ds)

    return run


def imagefolder_epochs(pngs: Path) -> Callable[[int], int]:
    from torchvision import datasets, transforms

    def gray(path: str) -> Image.Image:
        with Image.open(path) as im:
            return im.convert("L")

    ds = datasets.ImageFolder(str(pngs), transform=transforms.ToTensor(), loader=gray)
    loader = torch.utils.data.DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=0)

    def run(epoch: int) -> int:
        torch.manual_seed(epoch)
        return sum(len(y) for _, y in loader)

    return run


def memmap_epochs(npy: Path) -> Callable[[int], int]:
    mm = np.load(npy, mmap_mode="r")

    def batches(epoch: int) -> Iterator[torch.Tensor]:
        order = np.random.default_rng(epoch).permutation(len(mm))
        for start in range(0, len(order) - BATCH + 1, BATCH):
            out = np.empty((BATCH, *mm.shape[1:]), mm.dtype)
            for j, i in enumerate(order[start : start + BATCH]):
                out[j] = mm[i]
            yield torch.from_numpy(out)

    def run(epoch: int) -> int:
        return sum(len(b) for b in batches(epoch))

    return run


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--samples", type=int, default=9000)
    ap.add_argument("--size", default="197x148")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--data",
        type=Path,
        help="where to keep the generated data (default: a temporary directory)",
    )
    args = ap.parse_args()
    torch.set_num_threads(1)
    tmp = None
    if args.data is None:
        tmp = tempfile.TemporaryDirectory(prefix="hpcbench-loader-")
        args.data = Path(tmp.name)
    args.data.mkdir(parents=True, exist_ok=True)
    shards, pngs, npy = prepare(args.data, args.samples, parse_size(args.size))
    m = Manifest.load(shards)
    train = m.split("train")
    loaders = {
        "hpcbench reader, float32 normalised": reader_epochs(shards, True),
        "hpcbench reader, raw uint8": reader_epochs(shards, False),
        "torchvision ImageFolder over PNG": imagefolder_epochs(pngs),
        "numpy memmap, random per sample": memmap_epochs(npy),
    }
    for run in loaders.values():  # warm the page cache and the code paths
        run(0)
    rates: dict[str, list[float]] = {name: [] for name in loaders}
    for epoch in range(1, args.repeats + 1):
        for name, run in loaders.items():
            t = time.perf_counter()
            n = run(epoch)
            rates[name].append(n / (time.perf_counter() - t))
    med = {name: statistics.median(r) for name, r in rates.items()}
    c, h, w = m.shape
    print(
        f"loader benchmark: {train.samples} train samples of {c}x{h}x{w} {m.dtype} "
        f"({train.samples * m.sample_bytes / 2**20:.1f} MiB), batch {BATCH}, num_workers=0, "
        f"median of {args.repeats} warm epochs"
    )
    for name, rate in med.items():
        print(f"  {name:38s} {rate:>10,.0f} samples/s")
    vs_folder = med["hpcbench reader, float32 normalised"] / med["torchvision ImageFolder over PNG"]
    vs_memmap = med["hpcbench reader, raw uint8"] / med["numpy memmap, random per sample"]
    print(f"ratio reader (float32) / ImageFolder = {vs_folder:.1f}x   (target >= {FOLDER_TARGET})")
    print(f"ratio reader (uint8) / memmap        = {vs_memmap:.2f}x  (target >= 1.0)")

    split_bytes = train.samples * m.sample_bytes
    worst = overhead = 0.0
    for world in (1, 2, 4):
        amps = []
        for rank in range(world):
            before = rchar()
            ds = ShardedDataset(
                shards, "train", batch_size=BATCH, rank=rank, world_size=world, normalize=False
            )
            ds.set_epoch(1)
            for _ in ds:
                pass
            ds.close()
            read = rchar() - before
            amps.append(read / (split_bytes / world))
            overhead = max(overhead, read / ds.io_stats()["bytes_read"])
        worst = max(worst, *amps)
        print(
            f"read amplification W={world}: "
            + ", ".join(f"rank {r} {a:.3f}" for r, a in enumerate(amps))
        )
    print(
        f"worst read amplification = {worst:.3f}  (target <= 1.05; < 1 where drop skips a partial batch)"
    )
    ok = vs_folder >= FOLDER_TARGET and vs_memmap >= 1.0 and worst <= 1.05
    print("targets met" if ok else "TARGETS MISSED")
    if tmp is not None:
        tmp.cleanup()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
