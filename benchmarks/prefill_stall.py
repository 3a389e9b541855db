"""How long a decoding row waits while a long prompt joins its batch: the prefill in chunks against one pass.

    python benchmarks/prefill_stall.py --model qwen2.5-coder-0.5b --prompt-tokens 4000 --json FILE

One request decodes (greedy, ``--tokens`` tokens of a list it is asked to write); after its 8th token a prompt of
``--prompt-tokens`` tokens (HotpotQA dev paragraphs) is submitted. The times at which the decoding request's
tokens appear are recorded, and the table gives the longest and the median gap between two of them, and how long
the joining prompt took to its first token, with the engine's prefill in chunks (``batch.CHUNK_TOKENS``, the
default) and in one pass (a chunk larger than the prompt), on one loaded model.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import statistics
import time
from datetime import date
from pathlib import Path


def run(engine, decoding_ids: list[int], joining_ids: list[int], tokens: int) -> dict:
    """The decoding request's token gaps while the joining one is prefilled, and the joiner's time to first token."""
    from ragscale.programs.lm.batch import Job

    decoding = Job(decoding_ids, tokens, 0.0, None, ())
    joining = Job(joining_ids, 4, 0.0, None, ())
    engine._submit(decoding)
    seen, times = 0, []
    submitted = None
    while not decoding.done.is_set():
        if len(decoding.tokens) > seen:
            seen = len(decoding.tokens)
            times.append(time.perf_counter())
            if seen == 8 and submitted is None:
                submitted = time.perf_counter()
                engine._submit(joining)
        time.sleep(0.0005)
    if decoding.error is not None or submitted is None:
        raise SystemExit(f"the decoding request failed or ended before its 8th token: {decoding.error!r}")
    first_token = None
    while not joining.done.wait(0.001):
        if joining.tokens and first_token is None:
            first_token = time.perf_counter() - submitted
    joining.done.wait()
    if first_token is None:  # it finished between two looks: its first token came no later than that
        first_token = time.perf_counter() - submitted
    gaps = [b - a for a, b in itertools.pairwise(times)]
    return {
        "decoded": len(decoding.tokens),
        "longest_gap_s": round(max(gaps), 3),
        "median_gap_s": round(statistics.median(gaps), 4),
        "joiner_first_token_s": round(first_token, 2),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="preset, model directory or .gguf file")
    parser.add_argument("--prompt-tokens", type=int, default=4000, help="tokens of the prompt that joins")
    parser.add_argument("--tokens", type=int, default=96, help="tokens the decoding request generates")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)

    import json
    import os

    import torch

    from ragscale.experiments.files import write_json
    from ragscale.process import prepare_process
    from ragscale.programs.lm.engine import TorchEngine
    from ragscale.programs.lm.layouts import cpu_model
    from ragscale.programs.lm.models import load_model

    prepare_process(logging.WARNING)
    root = Path(os.environ.get("RAGSCALE_DATA_DIR") or Path(__file__).resolve().parents[2] / "shared" / "datasets")
    with (root / "hotpotqa" / "dev.jsonl").open(encoding="utf-8") as f:
        text = " ".join(p["text"] for line in f for p in json.loads(line)["paragraphs"])
    model, tokenizer = load_model(args.model)
    joining = tokenizer(text, add_special_tokens=False).input_ids[: args.prompt_tokens]
    ask = [{"role": "user", "content": "Write the numbers from 1 to 500, separated by commas."}]
    prompt = tokenizer.apply_chat_template(ask, add_generation_prompt=True, tokenize=False)
    decoding = tokenizer(prompt, add_special_tokens=False).input_ids
    results = {}
    for name, chunk in (("chunked", None), ("one pass", args.prompt_tokens + 1)):
        engine = TorchEngine(model, tokenizer, prefix_cache=False)
        if chunk:
            engine.batcher.chunk_tokens = chunk
        engine.batcher.decoder.compile_now()
        run(engine, decoding, joining[:256], 16)  # untimed: the worker starts
        results[name] = {"chunk_tokens": engine.batcher.chunk_tokens, **run(engine, decoding, joining, args.tokens)}
        engine.close()
    print(
        f"model {args.model}, weights {model.weight_layout}, decode {engine.batcher.decoder.way}, a "
        f"{len(joining):,}-token prompt joins a decoding row; CPU {cpu_model()}, {torch.get_num_threads()} threads"
    )
    print(f"{'prefill':>9} {'chunk':>6} {'longest gap s':>13} {'median gap s':>12} {'joiner first token s':>20}")
    for name, r in results.items():
        print(f"{name:>9} {r['chunk_tokens']:>6} {r['longest_gap_s']:>13} {r['median_gap_s']:>12} "
              f"{r['joiner_first_token_s']:>20}")  # fmt: skip
    result = {
        "model": args.model,
        "weights": model.weight_layout,
        "prompt_tokens": len(joining),
        "cpu": cpu_model(),
        "threads": torch.get_num_threads(),
        "date": date.today().isoformat(),
        **results,
    }
    if args.json:
        write_json(args.json, result, indent=2)
    return result


if __name__ == "__main__":
    main()
