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


def test_packed_linear_layers_give_the_dense_layers_logits(engine):
    import torch

    from ragscale.programs.lm.models import load_model
    from ragscale.programs.lm.packed import PackedLinear

    dense, _ = load_model("smollm2-135m", weights="dense")
    assert not any(isinstance(m, PackedLinear) for m in dense.modules())
    assert not any(type(m) is torch.nn.Linear for m in engine.model.modules())  # packed by default on CPU
    ids = torch.tensor([engine.tokenizer(EIFFEL).input_ids])
    with torch.inference_mode():
        packed_logits, dense_logits = engine.model(input_ids=ids).logits, dense(input_ids=ids).logits
    assert packed_logits.shape == dense_logits.shape
    torch.testing.assert_close(packed_logits, dense_logits, rtol=1e-4, atol=1e-3)
    assert torch.equal(packed_logits.argmax(-1), dense_logits.argmax(-1))


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


@pytest.mark.parametrize(
    ("flags", "layout"),
    [("fpu sse2 avx2 fma avx512f avx512_vnni avx512_bf16", "int8"), ("fpu sse2 avx2 fma", "fp32"), ("", "fp32")],
)
def test_the_layout_is_chosen_by_the_cpus_flags(tmp_path, flags, layout):
    from ragscale.programs.lm.layouts import cpu_flags, pick_layout

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        f"processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t: avx512_bf16\n"
    )
    assert cpu_flags(cpuinfo) == frozenset(flags.split())
    assert pick_layout(cpu_flags(cpuinfo)) == layout
    assert cpu_flags(tmp_path / "missing") == frozenset()


def test_auto_applies_the_layout_of_the_flags_found(monkeypatch):
    from ragscale.programs.lm import layouts
    from ragscale.programs.lm.models import load_model

    monkeypatch.setattr(layouts, "cpu_flags", lambda: frozenset({"avx2", "avx512_bf16"}))
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
    with pytest.raises(ValueError, match=r"'int4'.*auto, fp32, dense, int8"):
        load_model("smollm2-135m", weights="int4")
