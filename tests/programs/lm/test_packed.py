"""Linear layers on oneDNN's packed float32 weights give the dense layers' logits."""

import pytest

pytestmark = pytest.mark.slow


EIFFEL = (
    "Context: The Eiffel Tower is in Paris.\nQuestion: In which city is the Eiffel Tower? Answer with the city name."
)


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
