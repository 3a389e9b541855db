"""The split prefill attention is causal attention after cached keys, and only the passes it fits take it."""

import pytest
import torch

from ragscale.programs.lm import attention
from ragscale.programs.lm.attention import _splits, causal_after, split_attention


def masked(query, key, value, scale):
    """The reference: every key head copied per query head, the causal mask given explicitly."""
    heads, n, keys = query.shape[1], query.shape[2], key.shape[2]
    per_group = heads // key.shape[1]
    mask = causal_after(keys - n, n)[None, None]
    k, v = key.repeat_interleave(per_group, dim=1), value.repeat_interleave(per_group, dim=1)
    return torch.nn.functional.scaled_dot_product_attention(query, k, v, attn_mask=mask, scale=scale)


@pytest.mark.parametrize(("heads", "kv_heads", "past", "n"), [(6, 2, 37, 11), (4, 4, 5, 40), (14, 2, 300, 64)])
def test_split_attention_is_causal_attention_after_cached_keys(heads, kv_heads, past, n):
    g = torch.Generator().manual_seed(0)
    query = torch.randn(1, heads, n, 16, generator=g)
    key, value = (torch.randn(1, kv_heads, past + n, 16, generator=g) for _ in range(2))
    torch.testing.assert_close(split_attention(query, key, value, 0.25), masked(query, key, value, 0.25))


def test_only_one_rows_causal_pass_after_cached_keys_is_split():
    query, key = torch.zeros(1, 4, 3, 8), torch.zeros(1, 2, 10, 8)
    causal = causal_after(7, 3)[None, None]
    assert _splits(query, key, causal, 0.0, {})
    padded = causal.clone()
    padded[..., :2] = False  # a left-padded row
    assert not _splits(query, key, padded, 0.0, {})
    assert not _splits(query, key, causal.float(), 0.0, {})  # an additive mask
    assert not _splits(query, key, causal, 0.1, {})  # dropout
    assert not _splits(query, key, causal, 0.0, {"sliding_window": 4})
    assert not _splits(torch.zeros(1, 4, 1, 8), key, causal[..., -1:, :], 0.0, {})  # a decode step
    assert not _splits(torch.zeros(2, 4, 3, 8), torch.zeros(2, 2, 10, 8), causal, 0.0, {})  # two rows
    assert not _splits(torch.zeros(1, 4, 10, 8), key, causal_after(0, 10)[None, None], 0.0, {})  # no cached keys


def small_qwen():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=True, attn_implementation="sdpa",
    )  # fmt: skip
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).eval()
    for name, p in model.named_parameters():  # weights big enough that the logits differ from row to row
        p.data.normal_(1, 0.05) if "norm" in name else p.data.normal_(0, 0.2)
    return model


def prefill(model, ids: list[int], prefix: int, chunk: int) -> torch.Tensor:
    """Every position's logits, prefilled as the engine does: after a cached prefix, then in chunks."""
    from ragscale.programs.lm.decoder import model_logits
    from ragscale.programs.lm.kv import buffer_cache

    cache, outs = buffer_cache(model, 1, len(ids)), []
    with torch.inference_mode():
        for a, b in [(0, prefix), *((a, min(a + chunk, len(ids))) for a in range(prefix, len(ids), chunk))]:
            ones = torch.ones((1, b), dtype=torch.long)
            outs.append(model_logits(model, torch.tensor([ids[a:b]]), ones, torch.arange(a, b)[None], cache, 0))
    return torch.cat(outs, dim=1)


def test_a_model_prefilled_after_cached_keys_gives_sdpas_logits_through_the_split(monkeypatch):
    model = small_qwen()
    ids = torch.randint(1, 500, (90,), generator=torch.Generator().manual_seed(1)).tolist()
    expected = prefill(model, ids, prefix=17, chunk=25)
    calls = []
    monkeypatch.setattr(attention, "split_attention", lambda *a: calls.append(1) or split_attention(*a))
    assert attention.use_split_attention(model)
    assert model.config._attn_implementation == "ragscale"
    torch.testing.assert_close(prefill(model, ids, prefix=17, chunk=25), expected, rtol=1e-4, atol=1e-4)
    assert len(calls) == 3 * model.config.num_hidden_layers  # the three chunks after the prefix, every layer
