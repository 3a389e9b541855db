"""How the C heap holds a model's memory: few malloc arenas, a fixed mmap threshold, free pages given back.

A run's resident memory is the weights plus what glibc's allocator keeps, and its speed depends on how often the
allocator asks the kernel for fresh pages. glibc's habits: each thread that allocates gets an arena of its own (up
to eight per core), whose free space no other thread reuses; a block over the mmap threshold is mapped when
allocated and unmapped when freed, so every use of it faults its pages in again (zeroed by the kernel); and every
large block freed raises that threshold, so the heap grows by the largest blocks a run has freed.

``limit_heap`` caps the arenas at ``ARENAS`` and fixes the mmap threshold at ``MMAP_THRESHOLD`` (which stops the
raising) and the trim threshold at ``TRIM_THRESHOLD``. The threshold is a trade: a prefill's activations (a few MB
to tens of MB per layer for a 512-token prompt of a 0.5B model) kept in the heap are reused pass after pass, while
at a 1 MiB threshold each pass mapped and faulted in about 1.5 GB of them, which made a prefill 1.5x slower; larger
blocks (weights, the prefix cache's entries, KV buffers) stay in mmap and return to the system when freed.
``trim_heap`` hands back the free pages now (after loading frees the dequantised tensors and the weights that
a layout replaced). Both do nothing where the C library is not glibc, and ``limit_heap`` leaves a setting the user
made with glibc's own variables (``MALLOC_ARENA_MAX``, ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``) as
it is.

glibc reads the arena cap when the arenas first outnumber its first test (8 on 64-bit), so a cap set before that
holds; the command line sets it first thing, and loading a model sets it again for a program that calls the
library itself.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from functools import cache

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
"""glibc's ``mallopt`` parameter numbers (``malloc.h``)."""

ARENAS = 2
MMAP_THRESHOLD = 32 << 20
"""glibc's largest allowed mmap threshold on 64-bit."""
TRIM_THRESHOLD = 128 << 20


@cache
def _glibc():
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def limit_heap() -> None:
    """Cap the malloc arenas and fix the mmap and trim thresholds (see the module docstring), unless the user set
    them."""
    libc = _glibc()
    if libc is None:
        return
    if "MALLOC_ARENA_MAX" not in os.environ:
        libc.mallopt(M_ARENA_MAX, ARENAS)
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    if "MALLOC_TRIM_THRESHOLD_" not in os.environ:
        libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)


def trim_heap() -> None:
    """Give the pages that the C heap holds free back to the system (glibc only)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
