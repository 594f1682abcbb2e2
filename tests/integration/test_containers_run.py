"""A real container run: Charliecloud (Debian's charliecloud-runtime, which runs unprivileged
here) runs each rank of a local job in an image made on the spot (a static busybox and the
directories ch-run needs), started by mpiexec on the host: each rank reads the image's own file,
sees the rank variables the launcher set outside, and writes into the job's directory, bound at
the same path. Why not the others here: Apptainer and Singularity are not in Debian bookworm
(sid's need a newer glibc), enroot and pyxis not in Debian at all, podman needs a cgroup set-up
and rlimits this sandbox does not give it; their scripts are checked by
tests/unit/test_containers.py."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import hpcbench, mpiexec_available, require


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Path:
    """A Charliecloud image directory: busybox as the shell and its tools, a marker file."""
    busybox = shutil.which("busybox")
    require(busybox is not None and shutil.which("ch-run") is not None,
            "ch-run and busybox (apt-get install charliecloud-runtime busybox-static)")  # fmt: skip
    root = tmp_path_factory.mktemp("image") / "img"
    for d in ("bin", "dev", "proc", "sys", "tmp", "etc", "home", "mnt", "run", "var/tmp"):
        (root / d).mkdir(parents=True)
    shutil.copy(busybox, root / "bin" / "busybox")
    for tool in ("sh", "cat", "echo", "pwd"):
        (root / "bin" / tool).symlink_to("busybox")
    (root / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (root / "etc" / "group").write_text("root:x:0:\n")
    for name in ("hosts", "resolv.conf"):
        (root / "etc" / name).touch()
    (root / "marker").write_text("inside the image\n")
    return root


def test_charliecloud_runs_each_rank_inside_the_image_under_mpiexec(image, workdir):
    require(mpiexec_available(), "mpiexec (pip install mpich)")
    (workdir / "job.toml").write_text(
        f"""
[resources]
job_name = "contained"
nodes = 1
tasks_per_node = 2

[launcher]
kind = "mpiexec"

[environment.container]
runtime = "charliecloud"
image = {json.dumps(str(image))}

[program]
command = ["sh", "-c", 'echo "rank $PMI_RANK of $PMI_SIZE: $(cat /marker) in $(pwd)" > "rank-$PMI_RANK.txt"']
"""
    )
    env = {"USER": os.environ.get("USER") or "root"}  # ch-run refuses to start without it
    r = hpcbench("submit", "job.toml", "--scheduler", "local", "--wait", cwd=workdir, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in (0, 1):
        said = (workdir / f"rank-{rank}.txt").read_text()
        assert said == f"rank {rank} of 2: inside the image in {workdir}\n", said
    assert not (workdir / "marker").exists()  # the file was the image's, not the host's
    assert "marker" not in os.listdir(workdir)
