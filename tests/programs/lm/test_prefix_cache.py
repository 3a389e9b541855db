"""The radix tree of prompt prefixes, on small tensors whose values name their token (no model needed)."""

import pytest
import torch

from ragscale.programs.lm.prefix_cache import PrefixCache


def kv(ids: list[int], layers: int = 2) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Keys/values whose every entry is the token id at that position (values: its negative)."""
    keys = torch.tensor(ids, dtype=torch.float32)[None, None, :, None].expand(1, 2, len(ids), 3).contiguous()
    return [(keys, -keys) for _ in range(layers)]


def tokens(layers) -> list[int]:
    return layers[0][0][0, 0, :, 0].int().tolist()


def test_the_longest_stored_prefix_is_matched_and_its_keys_values_are_those_stored():
    cache = PrefixCache(1 << 20, min_tokens=2)
    cache.insert([1, 2, 3, 4, 5], kv([1, 2, 3, 4, 5]))
    n, layers = cache.match([1, 2, 3, 9, 9])
    assert n == 3 and tokens(layers) == [1, 2, 3]
    assert torch.equal(layers[1][1], -layers[1][0])
    assert cache.match([7, 1, 2]) == (0, None) and cache.misses == 1
    n, layers = cache.match([1, 2, 3, 4, 5], limit=4)  # a prompt keeps at least one token to compute
    assert n == 4 and tokens(layers) == [1, 2, 3, 4]


def test_prompts_that_share_a_start_share_its_node_and_a_match_can_span_nodes():
    cache = PrefixCache(1 << 20, min_tokens=2)
    cache.insert([1, 2, 3, 4], kv([1, 2, 3, 4]))
    one = cache.nbytes
    cache.insert([1, 2, 7, 8], kv([1, 2, 7, 8]))  # splits the first after [1, 2]
    assert len(cache) == 3 and cache.nbytes == one + one // 2  # [1, 2] is stored once
    n, layers = cache.match([1, 2, 7, 8, 9])
    assert n == 4 and tokens(layers) == [1, 2, 7, 8]
    cache.insert([1, 2, 3, 4, 5, 6], kv([1, 2, 3, 4, 5, 6]))  # extends a stored prompt: only [5, 6] is new
    assert cache.nbytes == one + one // 2 + one // 2
    assert tokens(cache.match([1, 2, 3, 4, 5, 6, 0])[1]) == [1, 2, 3, 4, 5, 6]


def test_the_stored_copy_does_not_change_when_the_caller_overwrites_its_tensors():
    cache = PrefixCache(1 << 20, min_tokens=2)
    layers = kv([1, 2, 3])
    cache.insert([1, 2, 3], layers)
    for k, v in layers:
        k.zero_()
        v.zero_()
    assert tokens(cache.match([1, 2, 3, 4])[1]) == [1, 2, 3]


def test_past_its_bound_the_least_recently_used_leaves_are_evicted():
    per_prompt = sum(k.nbytes + v.nbytes for k, v in kv([0, 0, 0]))
    cache = PrefixCache(2 * per_prompt, min_tokens=2)
    cache.insert([1, 1, 1], kv([1, 1, 1]))
    cache.insert([2, 2, 2], kv([2, 2, 2]))
    cache.match([1, 1, 1, 0])  # [1, 1, 1] is now used more recently than [2, 2, 2]
    cache.insert([3, 3, 3], kv([3, 3, 3]))
    assert cache.nbytes <= 2 * per_prompt and cache.evicted == 1
    assert cache.match([2, 2, 2, 0]) == (0, None)
    assert cache.match([1, 1, 1, 0])[0] == 3 and cache.match([3, 3, 3, 0])[0] == 3


def test_a_prompt_bigger_than_the_bound_is_not_stored_and_pushes_nothing_out():
    per_prompt = sum(k.nbytes + v.nbytes for k, v in kv([0, 0, 0]))
    cache = PrefixCache(2 * per_prompt, min_tokens=2)
    cache.insert([1, 1, 1], kv([1, 1, 1]))
    cache.insert([1, 1, 1, *range(10, 17)], kv([1, 1, 1, *range(10, 17)]))  # 7 tokens of its own: over the bound
    assert len(cache) == 1 and cache.nbytes == per_prompt and cache.evicted == 0
    assert cache.match([1, 1, 1, 10, 11])[0] == 3


def test_a_prompt_shorter_than_min_tokens_is_neither_stored_nor_matched():
    cache = PrefixCache(1 << 20, min_tokens=4)
    cache.insert([1, 2, 3], kv([1, 2, 3]))
    assert len(cache) == 0
    cache.insert([1, 2, 3, 4, 5], kv([1, 2, 3, 4, 5]))
    assert cache.match([1, 2, 3, 9]) == (0, None)
    with pytest.raises(ValueError, match="max_bytes"):
        PrefixCache(-1)
