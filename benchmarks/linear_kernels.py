"""What torch's CPU kernels make of a model's linear layers: the bound on each weight layout's speed.

    python benchmarks/linear_kernels.py [--shapes qwen2.5-0.5b] [--rows 1,8,512] [--json FILE]

Times, on random weights of Qwen2.5-0.5B's shapes (per decoder layer q, k, v, o, gate, up, down; times 24 layers;
plus the 151,936 x 896 output head), the linear layers of one forward pass over ``rows`` tokens with each kernel
torch offers on CPU:

- ``fp32``: oneDNN-packed float32 (``packed.PackedLinear``, the reference layout);
- ``bf16``: oneDNN-packed bfloat16 weights and activations;
- ``int8 weights, bf16 act``: ``torch._weight_int8pack_mm`` (one scale per output channel), the ``int8`` layout's
  decode path; ``int8 weights, fp32 act``: the same kernel on float32 activations;
- ``fp16 weights``: fbgemm's ``linear_dynamic_fp16`` (float32 activations);
- ``int8 weights and act``: fbgemm's dynamic int8 (``quantized.linear_dynamic``, activations quantised per call);
- ``int4 weights, bf16 act``: ``torch._weight_int4pack_mm_for_cpu`` (groups of 32).

It also times one decode step of a 24-layer Qwen2 model with hidden size 64 through transformers: the per-step
cost that is not the linear layers' arithmetic (Python, small kernels), a floor under any layout. Median of
several calls each; milliseconds per forward pass and the ratio to fp32.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from ragscale.experiments.files import write_json

QWEN05 = {"layers": 24, "shapes": [(896, 896), (896, 128), (896, 128), (896, 896), (896, 4864), (896, 4864),
                                   (4864, 896)], "head": (896, 151936)}  # fmt: skip


def median_s(fn, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def kernels(weight, rows: int):
    """``{kernel: call}`` for a float32 ``weight`` (out x in) and ``rows`` random float32 activations."""
    import torch

    x = torch.randn(rows, weight.shape[1])
    scale = weight.abs().amax(1) / 127
    q8 = torch.round(weight / scale[:, None]).clamp(-127, 127).to(torch.int8)
    packed = torch.ops.mkldnn._reorder_linear_weight(weight, 8)
    packed16 = torch.ops.mkldnn._reorder_linear_weight(weight.bfloat16(), 8)
    fp16 = torch.ops.quantized.linear_prepack_fp16(weight, None)
    qw = torch.quantize_per_channel(weight, scale.double(), torch.zeros(len(scale), dtype=torch.long), 0, torch.qint8)
    dyn = torch.ops.quantized.linear_prepack(qw, None)
    groups = weight.reshape(weight.shape[0], -1, 32)
    low, high = groups.amin(-1), groups.amax(-1)
    step = ((high - low) / 15).clamp(min=1e-8)
    q4 = torch.round((groups - low[..., None]) / step[..., None]).clamp(0, 15).to(torch.int32).flatten(1)
    q4 = torch._convert_weight_to_int4pack_for_cpu(q4, 1)
    zeros = torch.stack([step, low + 8 * step], -1).transpose(0, 1).contiguous().bfloat16()
    xb = x.bfloat16()
    return {
        "fp32": lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], ""),
        "bf16": lambda: torch.ops.mkldnn._linear_pointwise(xb, packed16, None, "none", [], ""),
        "int8 weights, bf16 act": lambda: torch._weight_int8pack_mm(xb, q8, scale.bfloat16()),
        "int8 weights, fp32 act": lambda: torch._weight_int8pack_mm(x, q8, scale),
        "fp16 weights": lambda: torch.ops.quantized.linear_dynamic_fp16(x, fp16),
        "int8 weights and act": lambda: torch.ops.quantized.linear_dynamic(x, dyn, False),
        "int4 weights, bf16 act": lambda: torch._weight_int4pack_mm_for_cpu(xb, q4, 32, zeros),
    }


def pass_ms(rows: int, shapes: dict, slow_limit_s: float) -> dict[str, float]:
    """ms of one forward pass's linear layers over ``rows`` tokens, per kernel (None: skipped, too slow; fp32, the
    reference, is always timed)."""
    import torch

    torch.manual_seed(0)
    layer = [kernels(torch.randn(n, k) * 0.02, rows) for k, n in shapes["shapes"]]
    head = kernels(torch.randn(shapes["head"][1], shapes["head"][0]) * 0.02, rows)
    out = {}
    with torch.inference_mode():
        for name in head:
            first = median_s(layer[-1][name], 1)
            if name != "fp32" and first * len(layer) * shapes["layers"] > slow_limit_s:
                out[name] = None
                continue
            reps = 10 if rows < 64 else 3
            total = sum(median_s(k[name], reps) for k in layer) * shapes["layers"] + median_s(head[name], reps)
            out[name] = round(1000 * total, 2)
    return out


def step_overhead_ms(steps: int = 30) -> float:
    """ms of one decode step of a 24-layer Qwen2 with hidden size 64 (next to no arithmetic)."""
    import torch
    from transformers import DynamicCache, Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=24, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=1000)  # fmt: skip
    model = Qwen2ForCausalLM(config).eval()
    with torch.inference_mode():
        cache, ids = DynamicCache(config=config), torch.randint(0, 1000, (1, 100))
        model(input_ids=ids, past_key_values=cache, use_cache=True)
        times = []
        for position in range(100, 100 + steps):
            start = time.perf_counter()
            position_ids = torch.tensor([[position]])
            model(input_ids=ids[:, :1], past_key_values=cache, position_ids=position_ids, logits_to_keep=1)
            times.append(time.perf_counter() - start)
    return round(1000 * statistics.median(times), 2)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,8,512", help="comma-separated tokens per forward pass")
    parser.add_argument("--slow-limit-s", type=float, default=5.0, help="skip a kernel whose pass would take longer")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    import warnings

    import torch

    from ragscale.programs.lm.layouts import cpu_flags

    warnings.filterwarnings("ignore")
    rows = [int(r) for r in args.rows.split(",")]
    result = {r: pass_ms(r, QWEN05, args.slow_limit_s) for r in rows}
    overhead = step_overhead_ms()
    flags = sorted(f for f in cpu_flags() if f.startswith(("avx512", "amx")) or f in ("avx2", "fma", "f16c"))
    print(f"Qwen2.5-0.5B's linear layers, torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"CPU flags {' '.join(flags)}\n")  # fmt: skip
    print("| kernel | " + " | ".join(f"{r} rows: ms (vs fp32)" for r in rows) + " |")
    print("|---|" + "--:|" * len(rows))
    for name in result[rows[0]]:
        cells = []
        for r in rows:
            ms, ref = result[r][name], result[r]["fp32"]
            cells.append("skipped (slow)" if ms is None else f"{ms:,.1f} ({ref / ms:.2f}x)")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"\none decode step of a 24-layer Qwen2 of hidden size 64 (the per-step floor): {overhead} ms")
    report = {"torch": torch.__version__, "threads": torch.get_num_threads(), "flags": flags,
              "pass_ms": {str(r): v for r, v in result.items()}, "step_overhead_ms": overhead}  # fmt: skip
    if args.json:
        write_json(args.json, report, indent=2)
    return report


if __name__ == "__main__":
    main()
