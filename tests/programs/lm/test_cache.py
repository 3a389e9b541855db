"""DSPy's LM cache made to unpickle with the restricted unpickler, keeping how it was set up
(tests/reliability/test_offline.py plants an entry that would run code and checks that it is refused)."""

import math

import dspy
from dspy.clients.cache import Cache

from ragscale.programs.lm.cache import cache_is_restricted, restrict_cache


def test_the_restricted_cache_keeps_the_size_limit_and_memory_tier_of_the_one_it_replaces(tmp_path, monkeypatch):
    limit = 1 << 26
    plain = Cache(True, False, str(tmp_path / "cache"), disk_size_limit_bytes=limit)
    monkeypatch.setattr(dspy, "cache", plain, raising=False)
    restrict_cache()
    assert cache_is_restricted() and dspy.cache is not plain
    assert dspy.cache.disk_cache.size_limit * len(dspy.cache.disk_cache._shards) == limit
    assert not dspy.cache.enable_memory_cache


def test_a_cache_already_restricted_or_without_a_disk_tier_is_left_as_it_is(tmp_path, monkeypatch):
    class Kept:
        pass

    restricted = Cache(True, True, str(tmp_path / "cache"), restrict_pickle=True, safe_types=[Kept])
    memory_only = Cache(False, True, None, memory_max_entries=math.inf)
    for cache in (restricted, memory_only):
        monkeypatch.setattr(dspy, "cache", cache, raising=False)
        assert cache_is_restricted()
        restrict_cache()
        assert dspy.cache is cache  # its safe types, or its memory tier, kept
