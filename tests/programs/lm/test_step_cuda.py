"""On a GPU, the decode step replayed as CUDA graphs gives the eager step's logits, which are transformers'.

A small Qwen2 with random weights, built from a config on the GPU (no weights travel). Skipped without a GPU.
"""

import pytest
import torch

from ragscale.programs.lm.decoder import Decoder, pick_way

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

PREFIX = 24


def small_qwen(dtype):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen2ForCausalLM(config).to(dtype).eval()
    for name, p in model.named_parameters():  # weights big enough that the logits differ from row to row
        p.data.normal_(1, 0.05) if "norm" in name else p.data.normal_(0, 0.2)
    return model


def prefixed(model, rows: int, spare: int = 0, room: int = 16):
    from ragscale.programs.lm.kv import buffer_cache

    cache = buffer_cache(model, rows, PREFIX + room, spare_rows=spare)
    ids = torch.randint(1, 500, (rows, PREFIX), generator=torch.Generator().manual_seed(1)).cuda()
    model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    return cache


def steps(decoder, cache, rows: int, n: int) -> list[torch.Tensor]:
    """``n`` steps of ``decoder`` on ``cache``, each feeding fixed tokens (the same for every decoder)."""
    out = []
    for i in range(n):
        feed = torch.tensor([[3 + 7 * r + 11 * i] for r in range(rows)], device="cuda")
        mask = torch.ones((rows, PREFIX + i + 1), dtype=torch.long, device="cuda")
        positions = torch.full((rows, 1), PREFIX + i, device="cuda")
        out.append(decoder(feed, mask, positions, cache))
    return out


@pytest.fixture(scope="module")
def model32():
    return small_qwen(torch.float32)


@torch.inference_mode()
@pytest.mark.parametrize("rows,spare", [(1, 0), (3, 5)])
def test_replayed_steps_give_the_eager_steps_logits_and_keys(model32, rows, spare):
    """One graph recorded at the batch's first step and replayed at the next five; 3 rows run as the bucket of 4."""
    eager, replayed = Decoder(model32, "static", graphs=False), Decoder(model32, "static")
    a_cache, b_cache = prefixed(model32, rows, spare), prefixed(model32, rows, spare)
    a, b = steps(eager, a_cache, rows, 6), steps(replayed, b_cache, rows, 6)
    assert replayed.graphs.recorded == 1 and replayed.graphs.replayed == 5
    for x, y in zip(a, b, strict=True):
        assert x.shape == (rows, 512)
        torch.testing.assert_close(y, x, rtol=1e-5, atol=1e-5)
    assert not torch.equal(b[0], b[1]), "every replay returned the same logits"
    torch.testing.assert_close(b_cache.layers[2].keys, a_cache.layers[2].keys, rtol=1e-5, atol=1e-5)


@torch.inference_mode()
def test_a_new_batch_records_its_own_graph_and_old_ones_are_dropped(model32):
    import ragscale.programs.lm.graphs as graphs

    decoder = Decoder(model32, "static")
    decoder.graphs.kept = 2
    held = [prefixed(model32, 2) for _ in range(3)]  # three batches alive at once: three sets of buffers
    expected = [steps(Decoder(model32, "hf"), prefixed(model32, 2), 2, 3) for _ in range(3)]
    for cache, want in zip(held, expected, strict=True):
        got = steps(decoder, cache, 2, 3)
        for x, y in zip(want, got, strict=True):
            torch.testing.assert_close(y, x, rtol=1e-4, atol=1e-4)
    assert decoder.graphs.recorded == 3 and decoder.graphs.replayed == 6
    assert len(decoder.graphs.graphs) == 2
    assert graphs.KEPT >= 2


@torch.inference_mode()
def test_in_bfloat16_the_step_is_as_close_to_float32_as_transformers_is(model32):
    """What lets ``auto`` take the engine's step on a GPU: with the model in bfloat16, its logits are no further
    from the float32 model's than transformers' own bfloat16 logits are."""
    import copy

    model16 = copy.deepcopy(model32).to(torch.bfloat16)
    for rows in (1, 3):
        truth = steps(Decoder(model32, "hf"), prefixed(model32, rows), rows, 6)
        ours = steps(Decoder(model16, "auto"), prefixed(model16, rows, spare=1), rows, 6)
        theirs = steps(Decoder(model16, "hf"), prefixed(model16, rows), rows, 6)
        for t, x, y in zip(truth, theirs, ours, strict=True):
            x = x.float()  # transformers' logits are the model's dtype; the step's are float32
            assert (y - t).abs().mean() <= 1.25 * (x - t).abs().mean(), "the step's rounding error is larger"
            assert (y - t).abs().max() <= 2 * (x - t).abs().max() + 1e-3


@torch.inference_mode()
def test_the_compiled_step_replayed_gives_the_eager_steps_logits(model32):
    eager, compiled = Decoder(model32, "static", graphs=False), Decoder(model32, "compiled")
    a, b = steps(eager, prefixed(model32, 2), 2, 4), steps(compiled, prefixed(model32, 2), 2, 4)
    assert compiled.step is not None, "the compiled step failed and fell back to transformers' forward"
    assert compiled.graphs.replayed == 3
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(y, x, rtol=1e-3, atol=1e-3)


def test_auto_takes_the_engines_step_on_a_gpu(model32):
    assert pick_way(model32) == ("static", 16)
