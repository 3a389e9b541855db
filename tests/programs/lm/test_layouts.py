"""Weight layouts of the linear layers: each gives float32's answers, and the CPU's flags choose among them."""

import pytest

pytestmark = pytest.mark.slow


EIFFEL = (
    "Context: The Eiffel Tower is in Paris.\nQuestion: In which city is the Eiffel Tower? Answer with the city name."
)


def logits_and_greedy(model, tokenizer, steps: int = 12):
    """The prompt's logits, and ``steps`` greedy tokens decoded one at a time (the engine's decode path)."""
    import torch

    messages = [{"role": "user", "content": EIFFEL}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = torch.tensor([tokenizer(prompt, add_special_tokens=False).input_ids])
    with torch.inference_mode():
        out = model.generate(
            ids, max_new_tokens=steps, do_sample=False, output_logits=True, return_dict_in_generate=True
        )
        logits = model(input_ids=ids).logits
    return logits, out.sequences[0, ids.shape[1] :].tolist()


def test_int8_weights_decode_the_float32_layouts_greedy_tokens_with_close_logits(engine, monkeypatch):
    import torch

    from ragscale.programs.lm.layouts import Int8Linear, weight_bytes
    from ragscale.programs.lm.models import load_model

    int8, _ = load_model("smollm2-135m", weights="int8")
    assert int8.weight_layout == "int8" and engine.model.weight_layout == "fp32"
    int8_bytes = sum(m.qweight.nbytes + m.scale.nbytes for m in int8.modules() if isinstance(m, Int8Linear))
    assert weight_bytes(int8) == weight_bytes(engine.model) + int8_bytes  # the float32 packed copies stay
    calls = []
    forward = Int8Linear.forward
    monkeypatch.setattr(Int8Linear, "forward", lambda self, x: calls.append(x.shape[:-1].numel()) or forward(self, x))
    ref_logits, ref_tokens = logits_and_greedy(engine.model, engine.tokenizer)
    logits, tokens = logits_and_greedy(int8, engine.tokenizer)
    assert tokens == ref_tokens
    # the prompt's pass ran on the float32 weights, exactly as the reference; the decode steps on the int8 ones
    torch.testing.assert_close(logits, ref_logits, rtol=1e-4, atol=1e-3)
    assert min(calls) == 1 and max(calls) > 4


BF16_FLAGS = "fpu sse2 avx2 fma avx512f avx512_vnni avx512_bf16"


@pytest.mark.parametrize(
    ("vendor", "flags", "layout"),
    [
        ("GenuineIntel", BF16_FLAGS, "int8"),
        ("GenuineIntel", BF16_FLAGS + " amx_bf16 amx_tile", "int8-bf16"),
        ("AuthenticAMD", BF16_FLAGS, "int8-bf16"),
        ("AuthenticAMD", "fpu sse2 avx2 fma avx512f", "fp32"),
        ("GenuineIntel", "fpu sse2 avx2 fma", "fp32"),
        ("", "", "fp32"),
    ],
)
def test_the_layout_is_chosen_by_the_cpus_flags_and_vendor(tmp_path, vendor, flags, layout):
    from ragscale.programs.lm.layouts import cpu_flags, cpu_vendor, pick_layout

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        f"processor\t: 0\nvendor_id\t: {vendor}\nmodel name\t: Some CPU\nflags\t\t: {flags}\n\n"
        "processor\t: 1\nvendor_id\t: Other\nflags\t: avx512_bf16\n"
    )
    assert cpu_flags(cpuinfo) == frozenset(flags.split())
    assert cpu_vendor(cpuinfo) == vendor
    assert pick_layout(cpu_flags(cpuinfo), cpu_vendor(cpuinfo)) == layout
    assert cpu_flags(tmp_path / "missing") == frozenset() and cpu_vendor(tmp_path / "missing") == ""


@pytest.mark.parametrize("layout", ["bf16", "int8-bf16", "int4-bf16"])
def test_bfloat16_layouts_decode_the_float32_layouts_greedy_tokens_in_less_memory(engine, layout):
    import torch

    from ragscale.programs.lm.layouts import Bf16Linear, Int4Linear, Int8Linear, weight_bytes
    from ragscale.programs.lm.models import bf16_supported, load_model

    if not bf16_supported():
        pytest.skip("oneDNN has no bfloat16 kernels on this CPU (it lacks AVX512BW/VL/DQ and AVX_NE_CONVERT)")
    from ragscale.programs.lm.packed import PackedLinear

    model, _ = load_model("smollm2-135m", weights=layout)
    assert model.weight_layout == layout
    kinds = {type(m) for m in model.modules()}
    assert Bf16Linear in kinds and torch.nn.Linear not in kinds
    assert (Int8Linear in kinds) == (layout == "int8-bf16") and (Int4Linear in kinds) == (layout == "int4-bf16")
    weights = sum(m.in_features * m.out_features for m in engine.model.modules() if isinstance(m, PackedLinear))
    # fp32 holds four bytes per linear weight; bf16 two; int8-bf16 two, one more of int8 and a scale per row;
    # int4-bf16 two, half a byte of int4 and a bfloat16 scale and zero point per 64 weights
    saved = weight_bytes(engine.model) - weight_bytes(model)
    assert saved == pytest.approx(weights * {"bf16": 2, "int8-bf16": 1, "int4-bf16": 1.4375}[layout], rel=0.02)
    ref_logits, ref_tokens = logits_and_greedy(engine.model, engine.tokenizer)
    logits, tokens = logits_and_greedy(model, engine.tokenizer)
    answer = engine.tokenizer.decode(ref_tokens).split("<|im_end|>")[0]
    assert engine.tokenizer.decode(tokens).startswith(answer) and answer.endswith("Paris.")
    if layout != "int4-bf16":  # 4 bits round coarsely enough to move the end of turn: the 135M goes on after it
        assert tokens == ref_tokens
    # bfloat16 keeps 8 bits of mantissa: the logits move, but by far less than they spread
    assert (logits - ref_logits).abs().mean() < 0.05 * ref_logits.std()


def test_auto_applies_the_layout_of_the_flags_found(monkeypatch):
    from ragscale.programs.lm import layouts
    from ragscale.programs.lm.models import load_model

    monkeypatch.setattr(layouts, "cpu_flags", lambda: frozenset({"avx2", "avx512_bf16"}))
    monkeypatch.setattr(layouts, "cpu_vendor", lambda: "GenuineIntel")
    model, _ = load_model("smollm2-135m", weights="auto")
    assert model.weight_layout == "int8"
    assert any(isinstance(m, layouts.Int8Linear) for m in model.modules())
    monkeypatch.setattr(layouts, "cpu_flags", lambda: frozenset({"avx2"}))
    assert load_model("smollm2-135m", weights="auto")[0].weight_layout == "fp32"


def test_a_layout_it_cannot_apply_names_why_and_the_choices():
    from ragscale.programs.lm.layouts import LAYOUTS
    from ragscale.programs.lm.models import WEIGHTS, load_model

    assert WEIGHTS == ("auto", *LAYOUTS)
    with pytest.raises(ValueError, match=r"float32 model on CPU.*bfloat16"):
        load_model("smollm2-135m", dtype="bfloat16", weights="int8")
    with pytest.raises(ValueError, match=r"'int4'.*auto, fp32, dense, int8, bf16, int8-bf16"):
        load_model("smollm2-135m", weights="int4")


@pytest.mark.parametrize("layout", ["bf16", "int8-bf16", "int4-bf16"])
def test_a_bfloat16_layout_on_a_cpu_without_bfloat16_kernels_names_the_flags_and_the_choices(monkeypatch, layout):
    from ragscale.programs.lm import models

    monkeypatch.setattr(models, "bf16_supported", lambda: False)
    with pytest.raises(ValueError, match=rf"'{layout}'.*AVX512BW.*AVX_NE_CONVERT.*'auto', 'fp32' or 'int8'"):
        models.load_model("smollm2-135m", weights=layout)


def test_rows_are_quantised_in_chunks_as_whole_and_the_weight_is_left_as_it_was():
    import torch

    from ragscale.programs.lm.layouts import quantize_rows

    weight = torch.randn(1000, 64)
    weight[3] = 0.0  # a row of zeros gets the smallest scale, not a division by zero
    original = weight.clone()
    whole, whole_scale = quantize_rows(weight, chunk=1000)
    chunked, chunked_scale = quantize_rows(weight, chunk=96)
    assert torch.equal(weight, original)
    assert torch.equal(whole, chunked) and torch.equal(whole_scale, chunked_scale)
    assert whole.dtype == torch.int8 and whole.abs().amax(1)[4:].eq(127).all() and whole[3].eq(0).all()
    torch.testing.assert_close(whole.float() * whole_scale[:, None], weight, atol=whole_scale.max().item(), rtol=0)


def test_groups_are_quantised_to_4_bits_in_chunks_as_whole_and_the_kernel_reads_them_back():
    import torch

    from ragscale.programs.lm.layouts import GROUP, quantize_groups

    weight = torch.randn(256, 4 * GROUP)
    weight[3] = 0.5  # a constant group gets the smallest scale, not a division by zero
    original = weight.clone()
    whole, whole_pairs = quantize_groups(weight, chunk=256)
    chunked, chunked_pairs = quantize_groups(weight, chunk=64)
    assert torch.equal(weight, original)
    assert torch.equal(whole, chunked) and torch.equal(whole_pairs, chunked_pairs)
    assert whole.shape == (256, 2 * GROUP) and whole_pairs.shape == (4, 256, 2)
    # the kernel on the identity reads each weight back within half a step of its group, and a little more for the
    # bfloat16 rounding of the scale, the zero point and the product
    read = torch._weight_int4pack_mm_for_cpu(torch.eye(4 * GROUP, dtype=torch.bfloat16), whole, GROUP, whole_pairs)
    step = whole_pairs[..., 0].float().repeat_interleave(GROUP, 0)  # (inputs, outputs)
    error = (read.float() - weight.t()).abs()
    assert (error <= 0.6 * step + 1e-6).all()
    assert error[:, 3].max() < 1e-2 and error.mean() < step.mean() / 3
