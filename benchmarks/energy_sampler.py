"""What the energy sampler costs the process it runs in: a CPU-bound pure-Python loop (the worst
case: the sampler's thread competes for the interpreter lock) timed with the sampler running and
without, interleaved (off, on, off, on, ...) in the same run so that the machine's noise falls on
both alike. Prints the medians and their ratio, e.g. ``sampler on/off: 1.004``.

The sampler reads this node's devices (NVML, RAPL); where none is readable (a VM) it reads a
powercap tree of two packages and their DRAM made in a temporary directory, so that every
reading still opens and parses files as on a real node.

    python benchmarks/energy_sampler.py [--interval 0.5] [--repeats 15] [--loop 2000000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hpcbench.energy.devices import Device  # noqa: E402
from hpcbench.energy.sampler import Sampler, discover  # noqa: E402


def work(n: int) -> float:
    """The CPU-bound loop: seconds it took."""
    started = time.perf_counter()
    total = 0
    for i in range(n):
        total += i * i % 7
    return time.perf_counter() - started


def fake_tree(root: Path) -> Path:
    for p in range(2):
        pkg = root / f"intel-rapl:{p}"
        dram = pkg / f"intel-rapl:{p}:0"
        dram.mkdir(parents=True)
        for d, name in ((pkg, f"package-{p}"), (dram, "dram")):
            (d / "name").write_text(name + "\n")
            (d / "energy_uj").write_text("123456\n")
            (d / "max_energy_range_uj").write_text("262143328850\n")
    return root


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--interval", type=float, default=0.5, help="sampler period, seconds")
    ap.add_argument("--repeats", type=int, default=15, help="timings of each case")
    ap.add_argument(
        "--loop", type=int, help="iterations of the loop (default: about max(1 s, 4 periods))"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sources, nvml = discover()
        where = "this node's devices"
        if not any(isinstance(s, Device) for s in sources):
            sources, nvml = discover(powercap_root=fake_tree(Path(tmp)))
            where = "a temporary powercap tree (nothing readable here)"
        readable = [s.name for s in sources if isinstance(s, Device)]
        per_iteration = work(1_000_000) / 1_000_000  # also the warm-up
        n = args.loop or int(max(1.0, 4 * args.interval) / per_iteration)
        off, on = [], []
        for _ in range(args.repeats):
            off.append(work(n))
            sampler = Sampler(sources, args.interval, nvml_module=None)
            sampler.start()
            on.append(work(n))
            sampler.stop()
        if nvml is not None:
            nvml.nvmlShutdown()
    m_off, m_on = statistics.median(off), statistics.median(on)
    print(f"devices read: {', '.join(readable)} ({where}); interval {args.interval} s")
    print(f"loop of {n:,} iterations, {args.repeats} timings with and without, interleaved")
    print(f"loop without sampler: median {m_off:.4f} s")
    print(f"loop with sampler:    median {m_on:.4f} s")
    print(f"sampler on/off: {m_on / m_off:.3f}")


if __name__ == "__main__":
    main()
