"""What a ragscale process sets about itself: the offline environment, bounded waits, the C heap, OpenMP's threads
and logging.

The lowest layer of the tree (``tests/test_layout.py``): every folder may import it, and it imports nothing of
ragscale and no heavy library at import time. Each entry point calls :func:`prepare_process` first: the
``ragscale`` command line, the demo and the benchmarks. The Python API has no entry point, so its modules call the
part they need where they need it: a module that imports ``datasets``, ``transformers``, MLflow or DSPy calls
:func:`go_offline` just before, loading a model calls :func:`limit_heap` and :func:`trim_heap`, and a thread that
ran torch calls :func:`release_openmp_threads`.

**Offline.** Each library reads its switch from the environment, most of them once, when they are first imported:
Hugging Face ``datasets`` (``load_dataset("json", ...)`` of a local file still makes a request without it) and the
model hub, DSPy's and LiteLLM's model price map (fetched from GitHub on first use), MLflow's telemetry. A variable
already set wins: ``HF_HUB_OFFLINE=0 HF_DATASETS_OFFLINE=0`` in the environment (before ragscale or the library is
first used) lets ``load_hub`` reach the hub. The variables stay set for the whole process, so other code in it that
uses these libraries is offline too.

**Bounded waits.** A call to a server waits at most ``REQUEST_TIMEOUT_S`` for its answer unless the caller gives
another wait (``load_lm``'s ``request_timeout``, ``--request-timeout``). MLflow's client reads its own bounds from
the environment on every request; by default it retries a failing tracking server for minutes, so
:func:`go_offline`, called before MLflow is first used, also sets ``WAITS_ENV``: a few quick retries and a timeout
per request, so that a tracking server that errors or stalls mid-run fails the run in seconds (a variable the user
set wins, as above).

**The C heap.** A run's resident memory is the weights plus what glibc's allocator keeps, and its speed depends on
how often the allocator asks the kernel for fresh pages. glibc's habits: each thread that allocates gets an arena
of its own (up to eight per core), whose free space no other thread reuses; a block over the mmap threshold is
mapped when allocated and unmapped when freed, so every use of it faults its pages in again (zeroed by the
kernel); and every large block freed raises that threshold, so the heap grows by the largest blocks a run has
freed. :func:`limit_heap` caps the arenas at ``ARENAS`` and fixes the mmap threshold at ``MMAP_THRESHOLD`` (which
stops the raising) and the trim threshold at ``TRIM_THRESHOLD``. The threshold is a trade: a prefill's activations
(a few MB to tens of MB per layer for a 512-token prompt of a 0.5B model) kept in the heap are reused pass after
pass, while mapped afresh each pass they are faulted in again every time (``docs/engine.md``); larger blocks
(weights, the prefix cache's entries, KV buffers) stay in mmap and return to the system when freed.
:func:`trim_heap` hands back the free pages now (after loading frees the dequantised tensors and the weights that
a layout replaced). Both do nothing where the C library is not glibc, and :func:`limit_heap` leaves a setting the
user made with glibc's own variables (``MALLOC_ARENA_MAX``, ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``)
as it is. glibc reads the arena cap when the arenas first outnumber its first test (8 on 64-bit), so a cap set
before that holds; :func:`prepare_process` sets it first thing, and loading a model sets it again for a program
that calls the library itself.

**OpenMP.** torch on Linux runs its CPU kernels on libgomp (bundled in ``torch/lib``). Every thread that runs a
multi-threaded torch op gets a pool of helper threads, kept until that thread exits. Once the helpers of all pools
outnumber the CPUs, libgomp stops spinning between parallel regions and puts helpers to sleep at once, and each of
the hundreds of small regions in a forward pass then waits for a wake-up, which on a machine of few cores makes the
LM engine's decode steps several times slower (``docs/engine.md``). :func:`release_openmp_threads` frees the
calling thread's pool (``omp_pause_resource_all(omp_pause_hard)``); the next torch op in that thread makes a new
one. Threads that run torch now and then (loading a model, embedding a batch, an idle engine worker) call it when
done. Without a libgomp that has the call it does nothing: only speed depends on it.

**Logging.** Only an entry point configures logging (:func:`prepare_process`): INFO to stderr, with the libraries
that log every request (``httpx``, LiteLLM, ...) quieted to warnings. A library module never does.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)

OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "MLFLOW_DISABLE_TELEMETRY": "true",
}
"""What keeps the libraries off the network: the model hub, ``datasets``, the price map, MLflow's telemetry."""

REQUEST_TIMEOUT_S = 300.0
"""How long a call to a server (an LM, a chroma server, a VLM) waits for its answer by default, in seconds."""

WAITS_ENV = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
}
"""MLflow's client bounds on a tracking server: 2 retries 2 s apart at most (its default is 7 over about four
minutes), each request waiting at most 30 s for an answer."""

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
"""glibc's ``mallopt`` parameter numbers (``malloc.h``)."""

ARENAS = 2
MMAP_THRESHOLD = 32 << 20
"""glibc's largest allowed mmap threshold on 64-bit."""
TRIM_THRESHOLD = 128 << 20

OMP_PAUSE_HARD = 2
"""libgomp's ``omp_pause_hard``: the pool's threads end, not merely sleep."""

QUIET_LOGGERS = ("alembic", "httpx", "LiteLLM", "urllib3")
"""Libraries that log at INFO on every request or migration: an entry point keeps them to warnings."""

RAISING_LOGGERS = ("mlflow.store.db.utils",)
"""Loggers that log an error with its traceback and then raise it (MLflow's store, on a full disk): the error raised
is reported once, in one line, so an entry point keeps them to critical messages."""


def prepare_process(log_level: int = logging.INFO) -> None:
    """What every entry point does first: the offline environment (before DSPy, LiteLLM or MLflow is imported),
    the C heap's limits (before the threads that allocate start), and logging at ``log_level`` to stderr with
    ``QUIET_LOGGERS`` at warnings and ``RAISING_LOGGERS`` at critical messages."""
    go_offline()
    limit_heap()
    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    for name in RAISING_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)


def go_offline() -> None:
    """Set every variable of ``OFFLINE_ENV`` and ``WAITS_ENV`` that is not set yet (one the user set is kept).

    Call it before the library that reads a variable is imported: ``datasets``, ``huggingface_hub`` and MLflow read
    theirs then, and a later change is not seen.
    """
    for key, value in {**OFFLINE_ENV, **WAITS_ENV}.items():
        os.environ.setdefault(key, value)


@functools.cache
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
