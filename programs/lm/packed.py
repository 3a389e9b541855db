"""Linear layers on oneDNN's packed weights, for float32 on CPU (imports torch: load it where used).

torch's dense ``nn.Linear`` on CPU runs MKL's sgemm, which can be far slower than oneDNN on the same float32
weights at the batch shapes the engine runs (``benchmarks/decode_step.py`` times both layouts; ``docs/engine.md``).
:func:`pack_linears` replaces every ``nn.Linear`` of a model with a :class:`PackedLinear`: the weight is
reordered once into oneDNN's blocked layout (``torch.ops.mkldnn._reorder_linear_weight``, the op torch's inductor
uses when it freezes a CPU model) and each call runs ``torch.ops.mkldnn._linear_pointwise``. The arithmetic is the
same float32 products summed in another order: logits agree with the dense layers within rtol 1e-4 (a test checks
it), so a greedy output can differ only at a near-tie.

A tied output head (``lm_head`` sharing the input embedding) gets its own packed copy; the embedding keeps the
dense one (more memory for a model with a large vocabulary).
"""

from __future__ import annotations

import torch

from ragscale.process import trim_heap


class PackedLinear(torch.nn.Module):
    """``nn.Linear``'s forward on a weight packed for oneDNN (inference only: there is no backward)."""

    def __init__(self, linear: torch.nn.Linear, batch_hint: int = 8) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), batch_hint)
        self.bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def can_pack(device: torch.device | str, dtype: torch.dtype) -> bool:
    """Whether packed layers apply to a model on ``device`` in ``dtype``: float32 on CPU, and torch with oneDNN."""
    return torch.device(device).type == "cpu" and dtype == torch.float32 and torch.backends.mkldnn.is_available()


def replace_linears(model: torch.nn.Module, make) -> int:
    """Replace every ``nn.Linear`` in ``model`` by ``make(linear)`` (a layer on oneDNN-packed weights), in place;
    the number replaced. A model :func:`can_pack` refuses gets an error naming why."""
    if not can_pack(model.device, model.dtype):
        raise ValueError(
            f"packed linear layers need a float32 model on CPU and torch with oneDNN; got {model.dtype} on "
            f"{model.device} (oneDNN available: {torch.backends.mkldnn.is_available()})"
        )
    # (parent, name) pairs, not the layers: each replaced layer's weights are freed before the next is made, so
    # the model never holds two full copies of its weights; the largest last (an output head is a quarter of a
    # small model), when the others' float32 weights are gone and its new copies fit in their place
    places = sorted(
        (
            (parent, name)
            for parent in model.modules()
            for name, child in parent.named_children()
            if type(child) is torch.nn.Linear
        ),
        key=lambda place: getattr(*place).weight.numel(),
    )
    for parent, name in places:
        setattr(parent, name, make(getattr(parent, name)))
        trim_heap()  # the freed weight's pages go back now, before the next layer's are made
    return len(places)


def pack_linears(model: torch.nn.Module) -> int:
    """Replace every ``nn.Linear`` in ``model`` by a :class:`PackedLinear`, in place; the number replaced."""
    return replace_linears(model, PackedLinear)


def maybe_pack(model: torch.nn.Module, pack: bool | None) -> int:
    """Apply :func:`pack_linears` as ``pack`` asks: None packs where it can (:func:`can_pack`), True insists (an
    error naming why where it cannot), False keeps torch's dense layers. The number of layers replaced."""
    return pack_linears(model) if pack or (pack is None and can_pack(model.device, model.dtype)) else 0
