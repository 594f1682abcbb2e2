"""glibc's allocator told to keep the memory a training step frees for the next step.

By default glibc's ``malloc`` gives a block of 32 MiB or more its own ``mmap`` and unmaps it when
it is freed, and returns the top of its heap to the kernel once more than twice its (adaptive)
threshold is free there. A PyTorch step on the CPU allocates and frees the same activations and
gradients at every step, so every step mapped fresh pages and the kernel zeroed and faulted each
of them in again. Measured on a 2-core machine (``benchmarks/allocator.py``, 40 steps of the
default training): 2.62 s of system time and 1.25 million page faults in 11.9 s; with the
thresholds below 0.77 s and 0.27 million in 9.9 s (peak memory 1.17 → 1.48 GB). This is what
the CPU tuning guides get by preloading jemalloc or tcmalloc, without a library to install.

:func:`keep_freed_memory` raises both thresholds with ``mallopt``; ``python -m hpcbench.train``
and ``python -m hpcbench.predict`` call it first thing (their processes are ours: a library call
from a notebook leaves the user's process alone). It changes nothing where the user chose:
``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_TOP_PAD_``, a
``glibc.malloc`` tunable in ``GLIBC_TUNABLES``, another allocator in ``LD_PRELOAD``, or
``HPCBENCH_MALLOC=system``; nor where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Mapping

#: a block this large or larger gets its own mapping (glibc's default adapts up to 32 MiB)
MMAP_THRESHOLD = 256 << 20
#: free memory at the top of the heap kept for reuse up to this much
TRIM_THRESHOLD = 1 << 30
#: mallopt's parameter numbers (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
#: the variables through which a user already chose how glibc's malloc behaves
USER_MALLOC_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")


def user_chose_allocator(environ: Mapping[str, str]) -> str | None:
    """The variable through which the user chose the allocator's behaviour, or None."""
    for name in USER_MALLOC_VARIABLES:
        if name in environ:
            return name
    if "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""):
        return "GLIBC_TUNABLES"
    preloaded = environ.get("LD_PRELOAD", "").replace(":", " ").split()
    if any("malloc" in os.path.basename(lib) for lib in preloaded):  # jemalloc, tcmalloc, mimalloc
        return "LD_PRELOAD"
    if environ.get("HPCBENCH_MALLOC", "").strip().lower() == "system":
        return "HPCBENCH_MALLOC"
    return None


def keep_freed_memory(environ: Mapping[str, str] | None = None) -> bool:
    """Raise glibc's mmap and trim thresholds for this process (and the processes it forks);
    False, changing nothing, where the user chose otherwise or the C library is not glibc."""
    environ = os.environ if environ is None else environ
    if not sys.platform.startswith("linux") or user_chose_allocator(environ):
        return False
    try:
        libc = ctypes.CDLL(None)
        if not hasattr(libc, "gnu_get_libc_version"):  # not glibc: musl's mallopt does nothing
            return False
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # each on its own: a glibc that refuses so high an mmap threshold (older ones cap it at
    # 32 MiB) gets its cap, and the trim threshold is set whatever it said
    mapped = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) or bool(
        mallopt(M_MMAP_THRESHOLD, 32 << 20)
    )
    trimmed = bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return mapped and trimmed
