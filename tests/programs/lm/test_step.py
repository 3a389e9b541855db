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


def test_a_batch_of_three_rows_with_spare_rows_gives_each_row_its_own_logits(model):
    """3 rows in buffers of 8 (a compiled step pads them to its bucket of 4, below): each row's own logits."""
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


def test_fused_int4_projections_equal_the_separate_layers_and_share_their_weights():
    from ragscale.programs.lm.layouts import Int4Linear

    torch.manual_seed(0)
    layers = [Int4Linear(torch.nn.Linear(128, n)) for n in (128, 64, 64)]  # float32 prefill: any CPU
    x = torch.randn(3, 128)
    with torch.inference_mode():
        separate = torch.cat([layer(x) for layer in layers], dim=-1)
        fused = Fused(layers)
        assert fused.kind == "int4" and torch.equal(fused(x), separate)
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


@pytest.fixture
def inductor_cache(tmp_path, monkeypatch):
    """An empty inductor cache of this test's own (a compile here compiles; its record goes there too)."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    return tmp_path / "inductor"


def test_the_compiled_step_gives_the_static_steps_tokens_and_a_second_compile_reads_the_cache(inductor_cache):
    """Compiled (inductor's own int8 kernel, the weights read as the graph's inputs): the same greedy tokens and
    logits within bfloat16's rounding, at one row and at three padded to the bucket of 4; another decoder of the
    same model compiling the same bucket reads inductor's cache."""
    from torch._dynamo.utils import counters

    from ragscale.programs.lm.decoder import recorded_compile_s

    model, _ = load_model("smollm2-135m", weights="int8")
    static, compiled = Decoder(model, "static"), Decoder(model, "compiled")
    misses = counters["inductor"]["fxgraph_cache_miss"]
    compiled._compile(4)
    assert compiled.compiled == {4} and counters["inductor"]["fxgraph_cache_miss"] > misses
    assert recorded_compile_s(compiled._key(4)) == round(compiled.compile_s[4], 2)
    for rows in (1, 3):
        feed, mask, positions = step_inputs(rows)
        compiled.buckets = [4]  # 1 row too runs as the bucket compiled
        with torch.inference_mode():
            a = static(feed, mask, positions, cache_with_prefix(model, rows, spare=5))
            b = compiled(feed, mask, positions, cache_with_prefix(model, rows, spare=5))
        assert compiled.step is not None, "the compiled step failed and fell back to transformers' forward"
        assert torch.equal(a.argmax(-1), b.argmax(-1))
        torch.testing.assert_close(a, b, rtol=0.05, atol=0.5)
    again = Decoder(model, "compiled")
    misses, hits = counters["inductor"]["fxgraph_cache_miss"], counters["inductor"]["fxgraph_cache_hit"]
    again._compile(4)
    assert counters["inductor"]["fxgraph_cache_miss"] == misses and counters["inductor"]["fxgraph_cache_hit"] > hits


def test_a_row_count_compiles_once_its_eager_steps_have_lost_what_the_compile_costs(inductor_cache, monkeypatch):
    """The ski rental: eager steps until half their time adds up to the recorded compile's cost, then the graph."""
    from ragscale.programs.lm import decoder as ways

    model, _ = load_model("smollm2-135m", weights="int8")
    decoder = Decoder(model, "compiled")
    compiles = []
    monkeypatch.setattr(decoder, "_compile", compiles.append)
    monkeypatch.setattr(ways, "recorded_compile_s", lambda key: 10.0)
    feed, mask, positions = step_inputs(1)
    with torch.inference_mode():
        logits = decoder(feed, mask, positions, cache_with_prefix(model, 1))
    torch.testing.assert_close(logits, reference_logits(model, 1), rtol=0.05, atol=0.5)  # the eager int8 step
    assert compiles == [] and 0 < decoder.lost[1] < 10  # half the step's time, short of the compile's 10 s
    decoder.lost[1] = 9.9999
    with torch.inference_mode():
        decoder(feed, mask, positions, cache_with_prefix(model, 1))
    assert compiles == [1]
    monkeypatch.setattr(ways, "recorded_compile_s", lambda key: ways.FIRST_COMPILE_S)
    assert ways.FIRST_COMPILE_S > 10  # a row count never compiled before costs a minute: a short run never pays


def test_a_row_count_whose_compile_fails_stays_eager_and_is_not_tried_again(inductor_cache, monkeypatch, caplog):
    import ragscale.programs.lm.kv as kv

    model, _ = load_model("smollm2-135m", weights="int8")
    decoder = Decoder(model, "compiled")

    def no_room(*args, **kwargs):
        raise MemoryError("no room for a KV buffer")

    with monkeypatch.context() as patched:
        patched.setattr(kv, "buffer_cache", no_room)
        decoder.compile_now()  # must not raise
    assert decoder.compiled == set() and decoder.failed == {1, 2, 4}
    assert "could not be compiled for 1 rows; they decode eagerly" in caplog.text
    decoder._compile(1)  # not tried again
    assert decoder.compiled == set()
    feed, mask, positions = step_inputs(2)
    with torch.inference_mode():
        logits = decoder(feed, mask, positions, cache_with_prefix(model, 2))
    torch.testing.assert_close(logits, reference_logits(model, 2), rtol=0.05, atol=0.5)


def test_cuda_graphs_are_refused_on_a_cpu(model):
    with pytest.raises(ValueError, match="CUDA graphs replay on a GPU; this model is on cpu"):
        Decoder(model, "static", graphs=True)


def test_a_short_run_answers_without_compiling_anything(inductor_cache):
    """Two questions through an engine whose way is ``compiled``: their steps run eagerly, no graph compiles (a
    short run never repays a compile), and the next run of the same questions compiles nothing either."""
    from torch._dynamo.utils import counters

    from ragscale.programs.lm import chat, load_lm, release_lm

    before = dict(counters["inductor"])
    for _ in range(2):
        lm = load_lm("smollm2-135m", max_tokens=12, cache=False, weights="int8", decode="compiled")
        answers = [chat(lm, [{"role": "user", "content": f"What is {n} plus {n}?"}]) for n in (2, 3)]
        decoder = lm.engine.batcher.decoder
        assert all(answers) and decoder.way == "compiled" and decoder.compiled == set() and decoder.lost[1] > 0
        release_lm(lm)
    assert dict(counters["inductor"]) == before
