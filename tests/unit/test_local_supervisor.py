"""The local scheduler's supervisor (bash, run in the job's own session): after the script it ends
only what the script really left running, and signals no process it did not find in the session."""

from __future__ import annotations

import subprocess
from pathlib import Path

from hpcbench.jobs.schedulers.local.supervisor import SUPERVISOR


def supervise(tmp_path: Path, script: str, grace: int = 5) -> tuple[str, list[str]]:
    """Run the supervisor as the local scheduler does (a session of its own), traced; (the exit
    status it recorded, the kill commands it ran)."""
    job = tmp_path / "job.sh"
    job.write_text(script)
    status = tmp_path / "job.exit"
    traced = subprocess.run(
        ["bash", "-x", "-c", SUPERVISOR, "supervisor", str(job), str(status), str(grace), "-"],
        capture_output=True, text=True, timeout=60, start_new_session=True,
    )  # fmt: skip
    kills = [line for line in traced.stderr.splitlines() if line.lstrip("+ ").startswith("kill ")]
    return status.read_text(), kills


def test_a_script_that_leaves_nothing_running_is_neither_waited_for_nor_signalled(tmp_path):
    recorded, kills = supervise(tmp_path, "exit 3\n")
    assert recorded == "3\n"
    assert kills == []  # its own $(…) subshell is no leftover: nothing to wait for or signal


def test_a_leftover_process_is_ended_and_the_status_written_after(tmp_path):
    recorded, kills = supervise(tmp_path, f"sleep 300 &\necho $! >{tmp_path}/pid\n", grace=5)
    assert recorded == "0\n"
    assert len(kills) == 1 and kills[0].lstrip("+ ").startswith("kill -TERM"), kills
    pid = (tmp_path / "pid").read_text().strip()
    assert pid in kills[0].split()
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()
