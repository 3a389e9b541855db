"""How the C heap holds a model's memory: few malloc arenas, large blocks in mmap, free pages given back.

A run's resident memory is the weights plus what glibc's allocator keeps. Three habits of glibc make that grow
past the weights on a long multi-threaded run: each thread that allocates gets an arena of its own (up to eight per
core), whose free space no other thread reuses; every large block freed raises the mmap threshold, so that later
tensors of a few MB (a prefill's activations, KV buffers, the prefix cache's entries) come from those arenas,
where free space fragments; and freed heap pages stay resident until ``malloc_trim``. ``limit_heap`` caps the
arenas at ``ARENAS`` and fixes the threshold at ``MMAP_THRESHOLD`` (which also stops the raising), so such blocks
are mapped and unmapped and return to the system when freed; ``trim_heap`` hands back the free pages now (after
loading frees the dequantised GGUF tensors and the weights that packing replaced). Both do nothing where the C
library is not glibc, and ``limit_heap`` leaves a setting the user made with glibc's own variables
(``MALLOC_ARENA_MAX``, ``MALLOC_MMAP_THRESHOLD_``) as it is.

glibc reads the arena cap when the arenas first outnumber its first test (8 on 64-bit), so a cap set before that
holds; the command line sets it first thing, and loading a model sets it again for a program that calls the
library itself.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from functools import cache

M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
"""glibc's ``mallopt`` parameter numbers (``malloc.h``)."""

ARENAS = 2
MMAP_THRESHOLD = 1 << 20


@cache
def _glibc():
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def limit_heap() -> None:
    """Cap the malloc arenas and fix the mmap threshold (see the module docstring), unless the user set them."""
    libc = _glibc()
    if libc is None:
        return
    if "MALLOC_ARENA_MAX" not in os.environ:
        libc.mallopt(M_ARENA_MAX, ARENAS)
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def trim_heap() -> None:
    """Give the pages that the C heap holds free back to the system (glibc only)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
