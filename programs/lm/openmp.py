"""Give a thread's idle OpenMP helper threads back, so the LM engine's worker keeps the CPU's cores to itself.

torch on Linux runs its CPU kernels on libgomp (bundled in ``torch/lib``). Every thread that runs a multi-threaded
torch op gets a pool of helper threads, kept until that thread exits. Once the helpers of all pools outnumber the
CPUs, libgomp stops spinning between parallel regions and puts helpers to sleep at once, and each of the hundreds
of small regions in a forward pass then waits for a wake-up, which on a machine of few cores makes the engine's
decode steps several times slower (``docs/engine.md``).

:func:`release_openmp_threads` frees the calling thread's pool (``omp_pause_resource_all(omp_pause_hard)``); the
next torch op in that thread makes a new one. Threads that run torch now and then (loading a model, embedding a
batch) call it when done. Without a libgomp that has the call it does nothing: only speed depends on it.
"""

from __future__ import annotations

import ctypes
import functools
import logging
from pathlib import Path

logger = logging.getLogger(__name__)

OMP_PAUSE_HARD = 2


@functools.cache
def _pause():
    import torch

    for path in sorted((Path(torch.__file__).parent / "lib").glob("libgomp*.so*")):
        try:
            return ctypes.CDLL(str(path)).omp_pause_resource_all
        except (OSError, AttributeError) as error:
            logger.debug("no omp_pause_resource_all in %s: %s", path, error)
    return None


def release_openmp_threads() -> bool:
    """Free the calling thread's OpenMP helper threads; whether it could (torch's libgomp has the call)."""
    pause = _pause()
    return pause is not None and pause(OMP_PAUSE_HARD) == 0
