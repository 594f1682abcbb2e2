"""``python -m hpcbench.probe``: the launch check any job can run before the real work.

Each rank prints who it is (rank, world, local rank, node, host, threads, visible GPUs) and, inside
an hpcbench job, leaves a record in ``$HPCBENCH_RUN_DIR/probe/``. Rank 0 then waits for every rank's
record and checks that the launch was consistent -- each rank present once, everyone agreeing on the
world size -- writing ``probe.json`` and exiting non-zero when it was not. Jobs run the trainer
(``hpcbench.train``) by default; ``hpcbench submit --module hpcbench.probe`` runs this instead.
Built on :mod:`hpcbench.this_rank`; no torch, no MPI.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from hpcbench.argparsing import Parser
from hpcbench.atomic import write_atomically
from hpcbench.jsonfile import JsonFileError, read_json
from hpcbench.placement.checks import placement_warnings
from hpcbench.placement.record import placement_record
from hpcbench.this_rank import LaunchInfo, detect_launch, job_id, line_buffered_output


def _write_json(path: Path, data: dict) -> None:
    write_atomically(path, json.dumps(data, indent=2, sort_keys=True))


def _read_record(path: Path) -> dict | None:
    try:
        return read_json(path, max_bytes=1 << 20)
    except JsonFileError:
        return None


def describe(info: LaunchInfo) -> dict:
    return {
        **info.as_dict(),
        "placement": placement_record(info),
        "pid": os.getpid(),
        "threads": os.environ.get("OMP_NUM_THREADS"),
        "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "emulated_node": os.environ.get("HPCBENCH_NODE"),
        "job_id": job_id(),
    }


def check_world(records: list[dict], world_size: int) -> list[str]:
    """Problems with the ranks' records: missing or duplicate ranks, disagreeing world sizes."""
    problems = []
    ranks = sorted(r["rank"] for r in records)
    if ranks != list(range(world_size)):
        problems.append(f"expected ranks 0..{world_size - 1}, got {ranks}")
    sizes = sorted({r["world_size"] for r in records})
    if sizes != [world_size]:
        problems.append(f"ranks disagree on the world size: {sizes}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m hpcbench.probe", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="seconds rank 0 waits for the other ranks' records",
    )
    args = parser.parse_args(argv)
    line_buffered_output()
    info = detect_launch()
    me = describe(info)
    print(
        f"[rank {info.rank}/{info.world_size}] local {info.local_rank}/{info.local_world_size} "
        f"node {info.node_rank} host {info.hostname} via {info.launcher}; "
        f"threads {me['threads'] or '-'}; GPUs {me['gpus'] or '-'}; "
        f"cores {me['placement']['cpus']} ({me['placement']['bound_by']})",
        flush=True,
    )
    run_dir = os.environ.get("HPCBENCH_RUN_DIR")
    if not run_dir:
        return 0
    records_dir = Path(run_dir) / "probe"
    records_dir.mkdir(parents=True, exist_ok=True)
    _write_json(records_dir / f"rank-{info.rank}.json", me)
    if info.rank != 0:
        return 0
    deadline = time.monotonic() + args.timeout
    while True:
        # A run directory can outlive its job id (a test cluster restarting its ids at 1):
        # only this job's records count.
        records = [
            r
            for r in map(_read_record, records_dir.glob("rank-*.json"))
            if r and r.get("job_id") == me["job_id"]
        ]
        if len(records) >= info.world_size or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    problems = check_world(records, info.world_size)
    warnings = placement_warnings([r["placement"] for r in records if r.get("placement")])
    for line in warnings:
        print(f"hpcbench: {line}", file=sys.stderr)
    _write_json(
        Path(run_dir) / "probe.json",
        {
            "world_size": info.world_size,
            "ranks": records,
            "problems": problems,
            "placement_warnings": warnings,
        },
    )
    if problems:
        print("probe: launch inconsistent: " + "; ".join(problems), file=sys.stderr)
        return 1
    nodes = len({(r["hostname"], r["node_rank"]) for r in records})
    print(f"probe: all {info.world_size} ranks reported from {nodes} node(s); launch consistent")
    return 0


if __name__ == "__main__":
    sys.exit(main())
