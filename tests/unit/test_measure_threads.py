"""The threads a measurement starts (rank 0's straggler scan of the telemetry, the node's energy
sampler) are stopped and joined when it ends, and at the interpreter's exit when the program
never ended it: none is left running while the interpreter (and torch, gloo) tear down."""

from __future__ import annotations

import subprocess
import sys
import threading
import warnings

from hpcbench.measure import telemetry as tm
from hpcbench.measure.recorder import Measurement
from hpcbench.this_rank import LaunchInfo
from tests.conftest import REPO


def ours() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("hpcbench")]


def test_rank_0_s_straggler_scan_is_joined_when_the_run_ends(tmp_path, monkeypatch):
    released = threading.Event()
    real = tm.latest_records

    def slow_filesystem(run_dir):  # a scan still reading when the run ends
        released.wait(5)
        return real(run_dir)

    monkeypatch.setattr(tm, "latest_records", slow_filesystem)
    m = Measurement(tmp_path / "run", telemetry=3600, timeout=0.1)
    m.start(LaunchInfo(0, 2, 0, 2, 0, "x", "h"))
    with m.phase("train"):
        m.step(samples=4)
    m._live.record(m)  # a record: rank 0 scans the ranks' records in its thread
    assert "hpcbench-stragglers" in ours()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rank 1 never comes: a warning
        threading.Timer(1.0, released.set).start()
        m.finish()
    assert ours() == []


def test_a_measurement_never_finished_stops_its_threads_at_exit(tmp_path):
    program = f"""
import atexit, threading, warnings
warnings.simplefilter("ignore")

def left():  # registered first: runs after hpcbench's own exit function
    names = [t.name for t in threading.enumerate() if t.name.startswith("hpcbench")]
    print("left running:", names, flush=True)

atexit.register(left)
from hpcbench import measure
from hpcbench.this_rank import LaunchInfo
m = measure.start({str(tmp_path / "run")!r}, energy=True, energy_interval=0.05, telemetry=0)
assert any(t.name == "hpcbench-energy" for t in threading.enumerate())
m.step(samples=4)  # and the program ends without m.finish()
"""
    done = subprocess.run([sys.executable, "-c", program], cwd=REPO, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "left running: []" in done.stdout, done.stdout + done.stderr
    assert not (tmp_path / "run" / "metrics.json").exists()  # never finished: never measured
