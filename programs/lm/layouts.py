"""Weight layouts of a model's linear layers on CPU, and the one a CPU's instruction set makes fastest.

- ``fp32``: float32 weights packed for oneDNN (``packed.PackedLinear``): the reference, and the fastest where the
  CPU multiplies nothing narrower well.
- ``dense``: torch's own ``nn.Linear`` (MKL's sgemm), left as loaded.
- ``int8``: each layer also holds its weight in int8, one scale per output channel, and a call on at most
  ``decode_rows`` rows (a decode step) runs ``torch._weight_int8pack_mm`` on it with bfloat16 activations: a
  decode step is bound by the bytes of weights it reads, and int8 reads a quarter of float32's. A call on more rows
  (a prefill) stays on the packed float32 weight, because that is compute-bound and torch's int8 kernel is slower
  there than oneDNN's float32. Both copies are kept: 1.25x the float32 weights in memory. torch vectorises this
  kernel's bfloat16 path with AVX512_BF16, so ``auto`` takes it only on a CPU that has that flag.

Activations are not quantised: dynamic int8 activations (fbgemm's ``quantize_dynamic``, the fast path for int8 x
int8 on VNNI) change Qwen2.5-0.5B's greedy answers on most prompts (its activations have outlier channels that one
scale per row cannot hold), while int8 weights with bfloat16 activations keep them (``benchmarks/lm_throughput.py``
measures the speed of each layout, ``benchmarks/layouts.py`` their answers against fp32's).
"""

from __future__ import annotations

from pathlib import Path

import torch

LAYOUTS = ("fp32", "dense", "int8")
"""The layouts; ``models.WEIGHTS`` (which the CLI and configs check without importing torch) adds ``auto``."""
DECODE_ROWS = 4
"""A linear call on at most this many rows (tokens) uses the int8 weights: at 8 rows the two paths cost the same."""


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The instruction-set flags of the first CPU in ``cpuinfo`` (empty where the file is missing, as off Linux)."""
    try:
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def pick_layout(flags: frozenset[str]) -> str:
    """The fastest layout whose answers match float32's on a CPU with ``flags``: ``int8`` where AVX512_BF16
    computes its bfloat16 activations natively, else ``fp32``."""
    return "int8" if "avx512_bf16" in flags else "fp32"


class Int8Linear(torch.nn.Module):
    """A linear layer with int8 weights for decode steps and oneDNN-packed float32 weights for prefill."""

    def __init__(self, linear: torch.nn.Linear, decode_rows: int = DECODE_ROWS) -> None:
        from ragscale.programs.lm.packed import PackedLinear

        super().__init__()
        self.in_features, self.out_features, self.decode_rows = linear.in_features, linear.out_features, decode_rows
        weight = linear.weight.detach().float()
        scale = (weight.abs().amax(1) / 127).clamp(min=torch.finfo(torch.float32).tiny)
        self.qweight = torch.round(weight / scale[:, None]).clamp(-127, 127).to(torch.int8)
        self.scale = scale.to(torch.bfloat16)
        self.packed = PackedLinear(linear)
        self.bias = self.packed.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        if rows > self.decode_rows:
            return self.packed(x)
        y = torch._weight_int8pack_mm(x.reshape(rows, -1).to(torch.bfloat16), self.qweight, self.scale)
        y = y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, decode_rows={self.decode_rows}"


def weight_bytes(model: torch.nn.Module) -> int:
    """The bytes of every tensor a model's modules hold (parameters, buffers, and the packed or int8 weights that
    the layouts keep as plain attributes), each storage counted once."""
    seen, total = set(), 0
    for module in model.modules():
        tensors = [*module.parameters(recurse=False), *module.buffers(recurse=False)]
        tensors += [v for v in vars(module).values() if isinstance(v, torch.Tensor)]
        for tensor in tensors:
            try:
                key = tensor.untyped_storage().data_ptr()
            except (RuntimeError, NotImplementedError):  # an opaque (mkldnn) tensor has no plain storage
                key = id(tensor)
            if key not in seen:
                seen.add(key)
                total += tensor.numel() * tensor.element_size()
    return total


def apply_layout(model: torch.nn.Module, weights: str) -> str:
    """Put ``model``'s linear layers in the layout ``weights`` (one of ``LAYOUTS``; ``models.layout_for`` turns the
    default and ``auto`` into one), in place; the layout applied."""
    from ragscale.programs.lm.packed import PackedLinear, replace_linears

    if weights not in LAYOUTS:
        raise ValueError(f"unknown weight layout {weights!r}; valid choices: {', '.join(LAYOUTS)}")
    if weights != "dense":
        replace_linears(model, PackedLinear if weights == "fp32" else Int8Linear)
    return weights
