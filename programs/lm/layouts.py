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
- ``bf16``: bfloat16 weights packed for oneDNN, used for every call with bfloat16 activations (each layer's input
  is rounded to bfloat16 and its output returned in float32; norms, attention and the residual stream stay
  float32): half of float32's memory, and where the CPU multiplies bfloat16 natively, about twice its speed at
  prefill and decode alike.
- ``int8-bf16``: ``int8``'s weights for decode steps and ``bf16``'s for prefill (0.75x float32's memory).
- ``int4-bf16``: ``int8-bf16`` with 4-bit weights for decode steps (asymmetric, a bfloat16 scale and zero point per
  ``GROUP`` inputs; ``torch._weight_int4pack_mm_for_cpu``): a step reads about half of int8's bytes, so it decodes
  faster, and it rounds more coarsely, so more greedy answers differ from float32's; ``auto`` does not take it. A
  layer whose shape the kernel does not take (:func:`int4_fits`) keeps int8 weights.

Where bfloat16 pays is a matter of the CPU, not only of its flags: on an AMD EPYC with AVX512_BF16 oneDNN's
bfloat16 layers run prefill at about 2x float32, on an Intel Xeon with the same flag and no AMX at 0.6x
(``benchmarks/linear_kernels.py``, ``docs/engine.md``). ``auto`` takes ``int8-bf16`` on an AMD CPU with
AVX512_BF16 and on any CPU with AMX_BF16, ``int8`` on other CPUs with AVX512_BF16, else ``fp32``.

Activations are not quantised: dynamic int8 activations (fbgemm's ``quantize_dynamic``, the fast path for int8 x
int8 on VNNI) change Qwen2.5-0.5B's greedy answers on most prompts (its activations have outlier channels that one
scale per row cannot hold), while int8 weights with bfloat16 activations keep them (``benchmarks/lm_throughput.py``
measures the speed of each layout, ``benchmarks/layouts.py`` their answers against fp32's).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ragscale.programs.lm.packed import PackedLinear, replace_linears

LAYOUTS = ("fp32", "dense", "int8", "bf16", "int8-bf16", "int4-bf16")
"""The layouts; ``models.WEIGHTS`` (which the CLI and configs check without importing torch) adds ``auto``."""
DECODE_ROWS = 4
"""A linear call on at most this many rows (tokens) uses the int8 weights: at 8 rows the two paths cost the same."""
GROUP = 64
"""Inputs per scale and zero point of the int4 weights."""


def _cpuinfo_field(cpuinfo: Path, field: str) -> str:
    try:
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.split(":", 1)[0].strip() == field:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The instruction-set flags of the first CPU in ``cpuinfo`` (empty where the file is missing, as off Linux)."""
    return frozenset(_cpuinfo_field(cpuinfo, "flags").split())


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The first CPU's ``model name`` with its family and model numbers, as ``cpuinfo`` gives them (empty where
    unknown): the CPU every figure is stated beside."""
    name = _cpuinfo_field(cpuinfo, "model name")
    family, model = _cpuinfo_field(cpuinfo, "cpu family"), _cpuinfo_field(cpuinfo, "model")
    return f"{name} (family {family} model {model})" if name and family and model else name


def cpu_vendor(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The first CPU's ``vendor_id`` in ``cpuinfo`` (``AuthenticAMD``, ``GenuineIntel``; empty where unknown)."""
    return _cpuinfo_field(cpuinfo, "vendor_id")


def pick_layout(flags: frozenset[str], vendor: str = "") -> str:
    """The fastest layout whose answers match float32's on a CPU with ``flags`` from ``vendor``: ``int8-bf16``
    where oneDNN's bfloat16 layers beat float32 (AVX512_BF16 on AMD, or AMX_BF16), ``int8`` where only torch's
    int8 kernel's bfloat16 activations are native (AVX512_BF16 elsewhere), else ``fp32``."""
    if "amx_bf16" in flags or ("avx512_bf16" in flags and vendor == "AuthenticAMD"):
        return "int8-bf16"
    return "int8" if "avx512_bf16" in flags else "fp32"


class Bf16Linear(torch.nn.Module):
    """A linear layer on oneDNN-packed bfloat16 weights: float32 in, bfloat16 products, float32 out (the bias is
    added in float32)."""

    def __init__(self, linear: torch.nn.Linear, batch_hint: int = 8) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach().bfloat16(), batch_hint)
        self.bias = None if linear.bias is None else linear.bias.detach().float()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.ops.mkldnn._linear_pointwise(x.to(torch.bfloat16), self.weight, None, "none", [], "")
        y = y.to(x.dtype)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def quantize_rows(weight: torch.Tensor, chunk: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
    """``weight`` in int8 with one float32 scale per row (its largest magnitude maps to 127), ``chunk`` rows at a
    time: the float32 temporaries of a whole output head would be several copies of it at once."""
    rows = weight.shape[0]
    qweight = torch.empty(weight.shape, dtype=torch.int8)
    scale = torch.empty(rows, dtype=torch.float32)
    for start in range(0, rows, chunk):
        block = weight[start : start + chunk].to(torch.float32, copy=True)
        block_scale = (block.abs().amax(1) / 127).clamp(min=torch.finfo(torch.float32).tiny)
        qweight[start : start + chunk] = block.div_(block_scale[:, None]).round_().clamp_(-127, 127)
        scale[start : start + chunk] = block_scale
    return qweight, scale


class Int8Linear(torch.nn.Module):
    """A linear layer with int8 weights for decode steps and oneDNN-packed weights for prefill: float32
    (``prefill=PackedLinear``, the default) or bfloat16 (``prefill=Bf16Linear``)."""

    def __init__(self, linear: torch.nn.Linear, decode_rows: int = DECODE_ROWS, prefill: type | None = None) -> None:
        super().__init__()
        self.in_features, self.out_features, self.decode_rows = linear.in_features, linear.out_features, decode_rows
        self.quantize(linear.weight.detach())
        self.packed = (prefill or PackedLinear)(linear)
        self.bias = None if linear.bias is None else linear.bias.detach().float()

    def quantize(self, weight: torch.Tensor) -> None:
        self.qweight, scale = quantize_rows(weight)
        self.scale = scale.to(torch.bfloat16)

    def product(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` (rows, in features; bfloat16) times the quantised weight."""
        return torch._weight_int8pack_mm(x, self.qweight, self.scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        if rows > self.decode_rows:
            return self.packed(x)
        y = self.product(x.reshape(rows, -1).to(torch.bfloat16))
        y = y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, decode_rows={self.decode_rows}"


def quantize_groups(weight: torch.Tensor, group: int = GROUP, chunk: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
    """``weight`` (out, in) in 4 bits per value, asymmetric over each ``group`` inputs of a row, packed for torch's
    CPU int4 kernel: the packed bytes ``(out, in / 2)`` and ``(in / group, out, 2)`` bfloat16 scales and zero
    points, a value being ``(q - 8) * scale + zero`` for ``q`` in 0..15. ``chunk`` rows at a time, as
    :func:`quantize_rows`."""
    rows, columns = weight.shape
    packed = torch.empty(rows, columns // 2, dtype=torch.uint8)
    scales_zeros = torch.empty(columns // group, rows, 2, dtype=torch.bfloat16)
    for start in range(0, rows, chunk):
        block = weight[start : start + chunk].to(torch.float32, copy=True).view(-1, columns // group, group)
        low, high = block.amin(-1, keepdim=True), block.amax(-1, keepdim=True)
        scale = ((high - low) / 15).clamp(min=torch.finfo(torch.float32).tiny)
        q = block.sub_(low).div_(scale).round_().clamp_(0, 15).to(torch.int32).view(-1, columns)
        packed[start : start + chunk] = torch._convert_weight_to_int4pack_for_cpu(q, 1)
        pairs = torch.cat((scale, low + 8 * scale), dim=-1).transpose(0, 1)  # (in / group, rows of the chunk, 2)
        scales_zeros[:, start : start + chunk] = pairs
    return packed, scales_zeros


def int4_fits(linear: torch.nn.Module, group: int = GROUP) -> bool:
    """Whether torch's int4 kernel takes ``linear``'s shape: outputs a multiple of 64 (its block of rows, so that
    fused layers' packed bytes concatenate) and inputs a multiple of ``group``."""
    return linear.out_features % 64 == 0 and linear.in_features % group == 0


class Int4Linear(Int8Linear):
    """:class:`Int8Linear` with 4-bit weights in groups of ``GROUP`` inputs (:func:`quantize_groups`) for decode
    steps: half of int8's bytes to read a step, at the cost of a coarser rounding that ``benchmarks/layouts.py``
    checks against float32's answers."""

    def quantize(self, weight: torch.Tensor) -> None:
        self.qweight, self.scales_zeros = quantize_groups(weight)

    def product(self, x: torch.Tensor) -> torch.Tensor:
        return torch._weight_int4pack_mm_for_cpu(x, self.qweight, GROUP, self.scales_zeros)


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
    if weights not in LAYOUTS:
        raise ValueError(f"unknown weight layout {weights!r}; valid choices: {', '.join(LAYOUTS)}")
    make = {
        "fp32": PackedLinear,
        "int8": Int8Linear,
        "bf16": Bf16Linear,
        "int8-bf16": lambda linear: Int8Linear(linear, prefill=Bf16Linear),
        "int4-bf16": lambda linear: (Int4Linear if int4_fits(linear) else Int8Linear)(linear, prefill=Bf16Linear),
    }
    if weights != "dense":
        replace_linears(model, make[weights])
    return weights
