"""Streaming a GGUF file's weights into the model, one tensor at a time, as transformers' from_pretrained loads it."""

import pytest

from ragscale.programs.lm.models import resolve

pytestmark = pytest.mark.slow


def test_a_gguf_loads_one_tensor_at_a_time_into_the_model_from_pretrained_loads():
    import torch
    from transformers import AutoModelForCausalLM

    from ragscale.programs.lm.gguf_loader import load_gguf

    path = resolve("smollm2-135m")
    streamed = load_gguf(path, torch.float32)
    reference = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    # from_pretrained also notes that the weights came from a GGUF file (quantization_config); nothing reads it
    theirs_config = {k: v for k, v in reference.config.to_dict().items() if k != "quantization_config"}
    assert streamed.config.to_dict() == theirs_config
    ours, theirs = streamed.state_dict(), reference.state_dict()
    assert ours.keys() == theirs.keys()
    assert [name for name in ours if not torch.equal(ours[name], theirs[name])] == []
    assert streamed.lm_head.weight is streamed.model.embed_tokens.weight  # tied, as the file has no output.weight
    assert streamed.generation_config.eos_token_id == reference.generation_config.eos_token_id
