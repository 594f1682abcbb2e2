"""The trainer's and the predictor's processes keep the memory a step frees for the next step
(hpcbench.allocator): the same large block allocated and freed again faults its pages in once,
not at every step; the user's own choice of allocator is left alone."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest

from hpcbench.allocator import keep_freed_memory, user_chose_allocator

# 20 "steps" each allocating, writing and freeing a 48 MiB block through the C library's malloc,
# as torch's CPU allocator does for a large activation or gradient (over glibc's adaptive 32 MiB
# mmap threshold); the page faults they took, and a block's pages
STEPS = """
import ctypes, mmap, resource
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
size = 48 << 20
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    libc.free(block)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, size // mmap.PAGESIZE)
"""


def faults(setup: str, env: dict[str, str] | None = None) -> tuple[int, int]:
    chosen = ("MALLOC_", "GLIBC_TUNABLES", "LD_PRELOAD", "HPCBENCH_MALLOC")  # this machine's own
    env = env or {k: v for k, v in os.environ.items() if not k.startswith(chosen)}
    r = subprocess.run([sys.executable, "-c", setup + STEPS], capture_output=True, text=True,
                       env=env, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    taken, pages = map(int, r.stdout.split()[-2:])
    return taken, pages


needs_glibc = pytest.mark.skipif(
    not hasattr(ctypes.CDLL(None), "gnu_get_libc_version"), reason="glibc's malloc only"
)


@needs_glibc
@pytest.mark.parametrize("entry", ["hpcbench.train", "hpcbench.predict"])
def test_the_trainers_and_predictors_processes_fault_a_freed_block_in_once(entry):
    setup = (
        "import contextlib, io, importlib\n"
        f"main = importlib.import_module('{entry}.__main__').main\n"
        "with contextlib.redirect_stdout(io.StringIO()): main(['--help'])\n"
    )
    taken, pages = faults(setup)
    assert taken < 3 * pages, f"{taken} page faults for 20 steps of a {pages}-page block"


@needs_glibc
def test_without_it_every_step_faults_the_block_in_again():
    """The peer of the test above, so that it cannot pass by accident: glibc's default maps a
    48 MiB block afresh at every step."""
    taken, pages = faults("")
    assert taken > 10 * pages


@needs_glibc
def test_the_users_own_choice_is_left_alone():
    env = {**os.environ, "HPCBENCH_MALLOC": "system"}
    taken, pages = faults(
        "from hpcbench.allocator import keep_freed_memory as k; assert not k()\n", env
    )
    assert taken > 10 * pages
    for chosen in (
        {"MALLOC_MMAP_THRESHOLD_": "131072"},
        {"MALLOC_TRIM_THRESHOLD_": "0"},
        {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"},
        {"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"},
        {"LD_PRELOAD": "/opt/lib/libtcmalloc_minimal.so.4:/opt/darshan/lib/libdarshan.so"},
        {"HPCBENCH_MALLOC": "System"},
    ):
        assert user_chose_allocator(chosen), chosen
        assert keep_freed_memory(chosen) is False, chosen
    for other in ({}, {"LD_PRELOAD": "/opt/darshan/lib/libdarshan.so"},
                  {"GLIBC_TUNABLES": "glibc.pthread.rseq=0"}, {"HPCBENCH_MALLOC": ""}):  # fmt: skip
        assert user_chose_allocator(other) is None, other
