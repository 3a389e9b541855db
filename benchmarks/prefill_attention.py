"""Prefill at long context with transformers' ``sdpa`` attention against the engine's split attention.

    python benchmarks/prefill_attention.py [--model qwen2.5-coder-0.5b] [--tokens 1500,6000] [--json FILE]

For each prompt length it prefills one prompt (random token ids) on one loaded model as the engine does: after
a cached prefix of 128 tokens (the engine's prefix cache holding a system turn) in one pass, and in chunks of
512 tokens (a prompt joining a running batch). Each is timed once with ``sdpa`` and once with the ``ragscale``
attention (``programs/lm/attention.py``); the table gives prompt tokens per second, the speed-up and the largest
difference between the two passes' logits (float rounding).
"""

from __future__ import annotations

import argparse
import time
from datetime import date
from pathlib import Path

PREFIX, CHUNK = 128, 512


def prefill(model, ids: list[int], prefix: int, chunk: int | None):
    """The logits of every position after ``prefix`` and the seconds their passes took."""
    import torch

    from ragscale.programs.lm.decoder import model_logits
    from ragscale.programs.lm.kv import buffer_cache

    cache = buffer_cache(model, 1, len(ids))

    def run(a: int, b: int):
        ones = torch.ones((1, b), dtype=torch.long)
        return model_logits(model, torch.tensor([ids[a:b]]), ones, torch.arange(a, b)[None], cache, 0)

    with torch.inference_mode():
        if prefix:
            run(0, prefix)
        start, outs = time.perf_counter(), []
        step = chunk or len(ids)
        for a in range(prefix, len(ids), step):
            outs.append(run(a, min(a + step, len(ids)))[0, -1])
        return torch.stack(outs), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--tokens", default="1500,6000", help="prompt lengths, comma-separated")
    parser.add_argument("--json", dest="json_path", type=Path)
    args = parser.parse_args()
    lengths = [int(t) for t in args.tokens.split(",")]

    import torch

    from ragscale.experiments.files import write_json
    from ragscale.programs.lm.attention import NAME
    from ragscale.programs.lm.layouts import cpu_flags, cpu_model
    from ragscale.programs.lm.models import load_model

    model, _ = load_model(args.model)
    torch.manual_seed(0)
    prefill(model, torch.randint(100, 30000, (PREFIX + CHUNK,)).tolist(), PREFIX, None)  # warm-up, not timed
    rows = []
    print("| prompt tokens | pass | sdpa tok/s | ragscale tok/s | speed-up | max logit difference |")
    print("|--:|---|--:|--:|--:|--:|")
    for length in lengths:
        ids = torch.randint(100, 30000, (length,)).tolist()
        for name, prefix, chunk in (("after a cached prefix", PREFIX, None), (f"chunks of {CHUNK}", 0, CHUNK)):
            model.set_attn_implementation("sdpa")
            ref, t_ref = prefill(model, ids, prefix, chunk)
            model.set_attn_implementation(NAME)
            new, t_new = prefill(model, ids, prefix, chunk)
            computed = length - prefix
            row = {
                "tokens": length,
                "pass": name,
                "sdpa_tok_s": computed / t_ref,
                "ragscale_tok_s": computed / t_new,
                "speedup": t_ref / t_new,
                "max_logit_diff": (ref - new).abs().max().item(),
            }
            rows.append(row)
            print(
                f"| {length:,} | {name} | {row['sdpa_tok_s']:.1f} | {row['ragscale_tok_s']:.1f} | "
                f"{row['speedup']:.2f}x | {row['max_logit_diff']:.1e} |",
                flush=True,
            )
    if args.json_path:
        write_json(
            args.json_path,
            {
                "model": args.model,
                "weights": model.weight_layout,
                "threads": torch.get_num_threads(),
                "cpu": cpu_model(),
                "flags": sorted(cpu_flags() & {"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16"}),
                "date": date.today().isoformat(),
                "rows": rows,
            },
        )


if __name__ == "__main__":
    main()
