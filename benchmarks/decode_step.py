"""What one decode step of the bare model costs at 1-8 rows, outside the engine: the floor of batched decoding.

    python benchmarks/decode_step.py --model smollm2-135m --lengths 160,1600

For each weight layout (oneDNN-packed linear layers, the engine's default on CPU, and torch's dense ones; see
``programs/lm/packed.py``) and each cache length L (the tokens already in every row's KV cache), rows of one
shared random prefix are laid out in the engine's in-place KV buffers (``BufferLayer``), and ``--steps``
single-token forward passes are timed at batch 1, 2, 4, 6 and 8; the table gives the median ms per step and its
ratio to one row. Compare it with the engine's own ms / step (``benchmarks/lm_throughput.py``) to see how much of
a batched step in a real run is the model's.
"""

from __future__ import annotations

import argparse
import statistics
import time

ROWS = (1, 2, 4, 6, 8)


def step_ms(model, prefix, rows: int, length: int, steps: int) -> float:
    """Median ms of one decode step for ``rows`` rows whose caches hold the ``length`` tokens of ``prefix``."""
    import torch
    from transformers import DynamicCache

    from ragscale.programs.lm.kv import BufferLayer

    cache = DynamicCache(config=model.config)
    cache.layers = [BufferLayer(rows, length + steps + 1, k, v) for k, v, *_ in prefix]
    mask = torch.ones((rows, length), dtype=torch.long)
    positions = torch.full((rows, 1), length)
    feed = torch.randint(100, 10_000, (rows, 1))
    times = []
    for _ in range(steps):
        mask = torch.cat([mask, mask.new_ones((rows, 1))], dim=-1)
        start = time.perf_counter()
        model(input_ids=feed, attention_mask=mask, position_ids=positions, past_key_values=cache, logits_to_keep=1)
        times.append(time.perf_counter() - start)
        positions = positions + 1
    return 1000 * statistics.median(times)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="preset, model directory or .gguf file")
    parser.add_argument("--lengths", default="160,1600", help="comma-separated KV cache lengths")
    parser.add_argument("--steps", type=int, default=12, help="decode steps timed per row count")
    parser.add_argument("--layouts", default="packed,dense", help="comma-separated weight layouts: packed, dense")
    args = parser.parse_args(argv)

    import torch
    from transformers import DynamicCache

    from ragscale.programs.lm.models import load_model

    results: dict[str, dict[int, dict[int, float]]] = {}
    for layout in args.layouts.split(","):
        if layout not in ("packed", "dense"):
            parser.error(f"--layouts: unknown layout {layout!r}; valid: packed, dense")
        model, _ = load_model(args.model, weights="fp32" if layout == "packed" else "dense")
        results[layout] = {}
        with torch.inference_mode():
            for length in [int(n) for n in args.lengths.split(",")]:
                prefix = DynamicCache(config=model.config)
                ids = torch.randint(100, 10_000, (1, length), device=model.device)
                model(input_ids=ids, past_key_values=prefix, use_cache=True, logits_to_keep=1)
                results[layout][length] = {rows: step_ms(model, prefix, rows, length, args.steps) for rows in ROWS}
        del model
    print(f"model {args.model}, torch threads {torch.get_num_threads()}, median of {args.steps} steps")
    header = " ".join(f"{f'{r} rows ms':>10}" for r in ROWS)
    print(f"{'weights':>7} {'cache length':>12} {header}  8 rows / 1 row")
    for layout, by_length in results.items():
        for length, row in by_length.items():
            times = " ".join(f"{row[r]:>10.1f}" for r in ROWS)
            print(f"{layout:>7} {length:>12} {times}  {row[8] / row[1]:>13.2f}x")
    return results


if __name__ == "__main__":
    main()
