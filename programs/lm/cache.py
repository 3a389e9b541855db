"""DSPy's LM cache read with restricted unpickling, so a cache directory cannot run code when it is read.

DSPy 3.4 keeps LM responses on disk (``DSPY_CACHEDIR``, default ``~/.dspy_cache``) as pickles and by default
unpickles them with plain ``pickle``: an entry written by someone else (a shared or copied cache directory) can run
any code when a request with its key is made. ``dspy.configure_cache(restrict_pickle=True)`` makes DSPy's unpickler
refuse every class outside a short list (pydantic types of ``litellm.types`` and ``openai.types``, numpy arrays).
Responses of ragscale's LMs, local engine and OpenAI-compatible servers alike, are stored as plain dicts, lists and
strings, which need no class, so nothing of ours is refused. DSPy deletes a refused entry and treats it as a miss
(the call is made again), logging it at DEBUG level.
"""

from __future__ import annotations

import math

import dspy
from dspy.clients.disk_serialization import _RestrictedDisk


def cache_is_restricted() -> bool:
    """Whether DSPy's current cache unpickles its disk entries with the restricted unpickler (True when it keeps
    nothing on disk)."""
    cache = dspy.cache
    if not cache.enable_disk_cache:
        return True
    return all(isinstance(shard._disk, _RestrictedDisk) for shard in cache.disk_cache._shards)


def restrict_cache() -> None:
    """Make DSPy's cache unpickle disk entries with restricted pickle, keeping its directory, size limit and memory
    tier; a cache already restricted (or without a disk tier) is left as it is, with any ``safe_types`` it has.

    ``load_lm`` calls it for every LM it builds: DSPy's cache is one per process, so this applies to the whole
    process. The memory tier starts empty when the cache is replaced.
    """
    if cache_is_restricted():
        return
    cache = dspy.cache
    disk = cache.disk_cache
    dspy.configure_cache(
        enable_disk_cache=True,
        enable_memory_cache=cache.enable_memory_cache,
        disk_cache_dir=cache.disk_cache_dir,
        disk_size_limit_bytes=int(disk.size_limit * len(disk._shards)),
        memory_max_entries=cache.memory_cache.maxsize if cache.enable_memory_cache else math.inf,
        restrict_pickle=True,
    )
