"""What the results history costs to write, and what several writers at once cost, in the same
run: R records (each the figures of a 6-configuration matrix) written by one process, by W
processes at once (R / W each, contending for SQLite's write lock), and by one process with the
rollback journal a network filesystem gets instead of WAL. Rounds are interleaved (one, many,
rollback, one, ...) so that the machine's noise falls on all alike; medians and ratios against
the single WAL writer are printed, and every store is checked whole afterwards (integrity_check,
row counts).

    python benchmarks/history_store.py [--records 120] [--writers 4] [--repeats 5]
"""

from __future__ import annotations

import argparse
import multiprocessing
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from hpcbench.history import store as store_module
from hpcbench.history.store import History

FIGURES = {
    f"config-{c}": {
        m: {"median": 1.0 + c, "ci95": [0.9 + c, 1.1 + c], "n": 5}
        for m in ("samples_per_s", "total_s", "train_s", "test_accuracy", "energy_j")
    }
    for c in range(6)
}


def write(path: str, first: int, count: int, journal: str) -> None:
    if journal == "delete":  # what a store on NFS, Lustre or GPFS gets
        store_module.filesystem_type = lambda _path: "nfs4"
    with History(path) as store:
        for i in range(first, first + count):
            store.record(
                kind="bench",
                name="bench",
                directory=f"/results/{i}",
                fingerprint=str(i),
                provenance={"torch": "2.3.0", "profile": "hydra"},
                matrix={"name": "bench"},
                analysis={"configs": []},
                figures=FIGURES,
                hosts=["n1"],
            )


def one_round(work: Path, kind: str, records: int, writers: int) -> float:
    path = work / f"{kind}-{time.time_ns()}.sqlite"
    journal = "delete" if kind == "rollback journal, one writer" else "wal"
    n = writers if kind.startswith(f"WAL, {writers}") else 1
    ctx = multiprocessing.get_context("fork")
    started = time.perf_counter()
    procs = [
        ctx.Process(target=write, args=(str(path), w * (records // n), records // n, journal))
        for w in range(n)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    elapsed = time.perf_counter() - started
    assert all(p.exitcode == 0 for p in procs), kind
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert db.execute("SELECT count(*) FROM results").fetchone()[0] == records // n * n
    db.close()
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=120)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    kinds = [
        "WAL, one writer",
        f"WAL, {args.writers} writers at once",
        "rollback journal, one writer",
    ]
    times: dict[str, list[float]] = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory(prefix="hpcbench-history-bench-") as tmp:
        for _ in range(args.repeats):
            for kind in kinds:
                times[kind].append(one_round(Path(tmp), kind, args.records, args.writers))
    base = statistics.median(times[kinds[0]])
    print(f"{args.records} records of {len(FIGURES)} configurations, {args.repeats} rounds")
    for kind in kinds:
        med = statistics.median(times[kind])
        print(
            f"{kind:34s} median {med * 1000:7.1f} ms  ({med / args.records * 1000:.2f} ms a "
            f"record)  ratio {med / base:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
