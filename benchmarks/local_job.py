"""What the local scheduler adds to a job's wall time, against running the same rendered script
with bash, in the same run: a job whose program is ``true`` (``program.command``) submitted and
waited for through ``submit`` and ``Job.wait``, and the same rendered script run directly, interleaved (local, direct, local, ...) so that the
machine's noise falls on both alike; the medians and their ratio are printed.

What the difference holds: the supervisor (waiting for its script, then for what the script left
running, then writing the exit status), the record, and the polling of ``wait``. A supervisor
that waits for leftovers that are not there shows here as seconds.

    python benchmarks/local_job.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hpcbench.jobs.render import render_script
from hpcbench.jobs.spec_load import build_spec
from hpcbench.jobs.submission import submit


def spec():
    return build_spec(
        {"program": {"command": ["true"]}, "resources": {"job_name": "bench", "time": "00:05:00"}}
    )


def local_round(work: Path) -> float:
    started = time.perf_counter()
    job = submit(spec(), "local", cwd=work, preflight=False)
    status = job.wait(timeout=120)
    took = time.perf_counter() - started
    assert status.state == "COMPLETED", status
    return took


def direct_round(work: Path, script: Path) -> float:
    started = time.perf_counter()
    env = {**os.environ, "HPCBENCH_JOB_ID": f"direct-{time.time_ns()}"}  # as the scheduler sets it
    done = subprocess.run(["bash", str(script)], cwd=work, env=env, capture_output=True)
    took = time.perf_counter() - started
    assert done.returncode == 0, done.stderr
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hpcbench-local-job-") as tmp:
        work = Path(tmp)
        os.environ["HPCBENCH_STATE_DIR"] = str(work / "state")
        script = work / "job.sh"
        script.write_text(render_script(spec(), "local"))
        times: dict[str, list[float]] = {"local job": [], "bash script": []}
        for _ in range(args.repeats):
            times["local job"].append(local_round(work))
            times["bash script"].append(direct_round(work, script))
    med = {name: statistics.median(values) for name, values in times.items()}
    for name, values in times.items():
        print(f"{name:12s} median {med[name]:.3f} s  (n={len(values)}, min {min(values):.3f} s)")
    print(f"local job / bash script: {med['local job'] / med['bash script']:.2f}")
    print(f"the local scheduler adds {med['local job'] - med['bash script']:.2f} s a job")
    return 0


if __name__ == "__main__":
    sys.exit(main())
