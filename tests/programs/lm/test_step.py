"""The engine's own decode step gives transformers' logits, in every layout it fuses, padded or not, compiled or not."""

import pytest
import torch

from ragscale.programs.lm.decoder import Decoder, pick_way
from ragscale.programs.lm.models import load_model
from ragscale.programs.lm.step import DecodeStep, Fused, supports

pytestmark = pytest.mark.slow

PREFIX = 40


def cache_with_prefix(model, rows: int, spare: int = 0):
    """A cache of ``BufferLayer``s holding PREFIX random tokens in ``rows`` rows (seeded), room for 8 more."""
    from ragscale.programs.lm.kv import buffer_cache

    cache = buffer_cache(model, rows, PREFIX + 8, spare_rows=spare)
    ids = torch.randint(100, 5000, (rows, PREFIX), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    return cache


def step_inputs(rows: int):
    feed = torch.tensor([[7 + 11 * r] for r in range(rows)])
    positions = torch.full((rows, 1), PREFIX)
    mask = torch.ones((rows, PREFIX + 1), dtype=torch.long)
    return feed, mask, positions


def reference_logits(model, rows: int):
    feed, mask, positions = step_inputs(rows)
    with torch.inference_mode():
        return Decoder(model, "hf")(feed, mask, positions, cache_with_prefix(model, rows))


@pytest.fixture(scope="module", params=["fp32", "dense"])
def model(request):
    """SmolLM2 in float32: oneDNN-packed layers (not fused) and torch's own (fused)."""
    return load_model("smollm2-135m", weights=request.param)[0]


def test_static_step_gives_transformers_logits_and_writes_the_same_keys(model):
    rows = 2
    expected = reference_logits(model, rows)
    feed, mask, positions = step_inputs(rows)
    cache = cache_with_prefix(model, rows)
    with torch.inference_mode():
        got = Decoder(model, "static")(feed, mask, positions, cache)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert cache.layers[0].length == PREFIX + 1  # the step's column is now part of the filled cache
    hf_cache = cache_with_prefix(model, rows)
    with torch.inference_mode():
        Decoder(model, "hf")(feed, mask, positions, hf_cache)
    torch.testing.assert_close(cache.layers[3].keys, hf_cache.layers[3].keys, rtol=1e-4, atol=1e-4)


def test_a_padded_batch_gives_each_real_row_its_own_logits(model):
    """3 rows run as the bucket of 4 (into a spare row of the buffers): the real rows' logits do not change."""
    expected = reference_logits(model, 3)
    feed, mask, positions = step_inputs(3)
    cache = cache_with_prefix(model, 3, spare=5)
    with torch.inference_mode():
        got = Decoder(model, "static")(feed, mask, positions, cache)
    assert got.shape[0] == 3
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_fused_int8_projections_equal_the_separate_layers_and_share_their_weights():
    from ragscale.programs.lm.layouts import Int8Linear

    torch.manual_seed(0)
    layers = [Int8Linear(torch.nn.Linear(64, n)) for n in (64, 16, 16)]
    x = torch.randn(3, 64)
    with torch.inference_mode():
        separate = torch.cat([layer(x) for layer in layers], dim=-1)
        fused = Fused(layers)
        assert torch.equal(fused(x), separate)
        assert torch.equal(torch.cat([layer(x) for layer in layers], dim=-1), separate)  # the layers still work
    start, end = fused.qweight.data_ptr(), fused.qweight.data_ptr() + fused.qweight.numel()
    assert all(start <= layer.qweight.data_ptr() < end for layer in layers), "a layer kept its own copy"


def test_auto_compiles_only_where_int8_weights_decode_on_a_cpu():
    dense, _ = load_model("smollm2-135m", weights="dense")
    assert pick_way(dense) == ("hf", 16)
    int8, _ = load_model("smollm2-135m", weights="int8")
    assert pick_way(int8) == ("compiled", 4)
    with pytest.raises(ValueError, match="valid choices: auto, hf, static, compiled"):
        pick_way(int8, "fast")


def test_a_model_of_another_architecture_is_refused_with_the_reason():
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100))
    assert "'gpt2' is not one of llama, qwen2" in supports(gpt2)
    with pytest.raises(ValueError, match="cannot run this model"):
        DecodeStep(gpt2)


def test_the_compiled_step_gives_the_static_steps_tokens(monkeypatch):
    """Compiled with freezing (int8 weights as constants, inductor's own int8 kernel): the same greedy tokens and
    logits within bfloat16's rounding, at one row and at three, both padded to the one bucket compiled (each bucket
    is a compile of its own, the slowest part of this test; the engine's worker compiles 1, 2 and 4 rows alike)."""
    from ragscale.programs.lm import decoder as ways

    monkeypatch.setattr(ways, "memory", lambda: (2**40, 2**40))  # room for every bucket, whatever else runs here
    model, _ = load_model("smollm2-135m", weights="int8")
    static, compiled = Decoder(model, "static"), Decoder(model, "compiled")
    compiled.wanted = [4]
    compiled.prepare()  # what an engine's worker does before its first batch
    assert compiled.prepared
    for rows in (1, 3):
        feed, mask, positions = step_inputs(rows)
        with torch.inference_mode():
            a = static(feed, mask, positions, cache_with_prefix(model, rows, spare=5))
            b = compiled(feed, mask, positions, cache_with_prefix(model, rows, spare=5))
        assert compiled.step is not None, "the compiled step failed and fell back to transformers' forward"
        assert torch.equal(a.argmax(-1), b.argmax(-1))
        torch.testing.assert_close(a, b, rtol=0.05, atol=0.5)


def test_a_bucket_whose_warm_up_fails_is_left_to_transformers_forward_and_not_tried_again(monkeypatch, caplog):
    import ragscale.programs.lm.kv as kv
    from ragscale.programs.lm import decoder as ways

    model, _ = load_model("smollm2-135m", weights="int8")
    decoder = Decoder(model, "compiled")

    def no_room(*args, **kwargs):
        raise MemoryError("no room for a KV buffer")

    monkeypatch.setattr(kv, "buffer_cache", no_room)
    monkeypatch.setattr(ways, "memory", lambda: (2**40, 2**40))  # room for the bucket, whatever else runs here
    decoder.prepare()  # what the engine's worker does; it must not end the worker
    assert decoder.buckets == [] and decoder.max_rows == 0 and decoder.prepared
    assert "could not be compiled for 1 rows" in caplog.text


def test_buckets_are_compiled_only_while_the_weights_copy_leaves_memory_free(monkeypatch, caplog):
    """Each bucket's graph holds a copy of the step's weights: with no room for one, no bucket is compiled, the
    reason is logged, and every step (no graph compiled at run time either) is transformers' forward."""
    from ragscale.programs.lm import decoder as ways

    model, _ = load_model("smollm2-135m", weights="int8")
    decoder = Decoder(model, "compiled")
    copy = decoder.step.weight_bytes()
    assert copy >= sum(layer.qweight.numel() for layer in decoder.step.modules() if isinstance(layer, Fused))
    monkeypatch.setattr(ways, "memory", lambda: (copy + 2**30, 8 * 2**30))  # a copy would leave 1 of 8 GB
    decoder.prepare()
    assert decoder.buckets == [] and decoder.max_rows == 0
    assert "not compiled for 1 or more rows" in caplog.text
    feed, mask, positions = step_inputs(2)
    with torch.inference_mode():
        logits = decoder(feed, mask, positions, cache_with_prefix(model, 2))
    torch.testing.assert_close(logits, reference_logits(model, 2))
    assert not decoder.prepared
    caplog.clear()
    room = iter([(copy + 8 * 2**30, 16 * 2**30)])  # another model released: room for one more copy, then none
    monkeypatch.setattr(ways, "memory", lambda: next(room, (copy + 2**30, 8 * 2**30)))
    decoder.prepare()  # what the engine's worker does whenever it goes from idle to busy
    assert decoder.buckets == [1] and decoder.max_rows == 1 and not decoder.prepared
    assert "not compiled for 2 or more rows" in caplog.text


def test_cuda_graphs_are_refused_on_a_cpu(model):
    with pytest.raises(ValueError, match="CUDA graphs replay on a GPU; this model is on cpu"):
        Decoder(model, "static", graphs=True)
