"""How fast the local LM engine serves DSPy: prefill/decode tokens/s and questions per minute.

    python benchmarks/lm_throughput.py --model smollm2-135m --limit 16 --json runs/lm_throughput.json
                                       [--weights fp32] [--layouts fp32,int8] [--llama-bench PATH]
    python benchmarks/lm_throughput.py --layouts int8-bf16:hf,int8-bf16 --llama-bench PATH   # decode step's ways

0. For each weight layout of ``--layouts`` (``programs/lm/layouts.py``; ``LAYOUT:WAY`` also names how its decode
   steps run, ``decoder.DECODE_WAYS``, else the engine's ``auto``), in one run: prefill tokens/s of one 512-token
   prompt and decode tokens/s at 1 and 8 rows; with ``--llama-bench`` (a llama.cpp ``llama-bench``
   binary, an optional anchor), llama.cpp's prefill (512 tokens) and one-row decode on the same GGUF file, with
   the same number of threads.
1. Prefill and decode tokens/s of the engine's model (``--weights``) at batch 1, 4 and 8 (512-token HotpotQA
   prompts, 32 decode steps, the same cache layout the engine uses).
2. Questions per minute through ``dspy.LM`` (DSPy cache off) at 1 and 8 threads, for
   - short prompts: one HotpotQA dev paragraph + question, <= 200 input tokens;
   - DRAG-shaped prompts: ~1,000 tokens of demonstrations shared by every question (from dev questions that
     are not measured) + ~500 tokens of the question's own paragraphs; <= 32 output tokens.
   Before each run the prefix cache is emptied and given one unmeasured question, so it holds the shared
   demonstrations and nothing a measured question sends.
3. Where the engine's time went in each of those runs (seconds of prefill and decode, decode steps, mean decode
   batch, ms per step, prompt tokens computed and sent), and two ceilings on the 8-thread speed-up: prefill does
   not shrink with batching (it is compute-bound), decoding at best shrinks to one full batch per step at the
   measured step cost ("ideal"), and at the very best costs nothing ("bound").

The data is read straight from ``hotpotqa/dev.jsonl`` (``$RAGSCALE_DATA_DIR`` or ``<repo>/../shared/datasets``).
Timings on a shared machine are noisy: compare runs taken under the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ragscale.experiments.files import write_json

DEMO_TOKENS, DOC_TOKENS, SHORT_TOKENS, MAX_OUTPUT = 1000, 500, 200, 32


def dev_examples() -> list[dict]:
    root = Path(os.environ.get("RAGSCALE_DATA_DIR") or Path(__file__).resolve().parents[2] / "shared" / "datasets")
    with (root / "hotpotqa" / "dev.jsonl").open(encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def clip(engine, text: str, tokens: int) -> str:
    ids = engine.tokenizer(text, add_special_tokens=False).input_ids
    return text if len(ids) <= tokens else engine.tokenizer.decode(ids[:tokens])


def drag_messages(engine, examples: list[dict], demo_pool: list[dict]) -> list[list[dict]]:
    demos, used = [], 0
    for ex in demo_pool:
        gold = next(p for p in ex["paragraphs"] if p["is_supporting"])
        demo = f"Document: {gold['title']}: {gold['text']}\nQuestion: {ex['question']}\nAnswer: {ex['answers'][0]}\n"
        demos.append(demo)
        used += engine.count_tokens(demo)
        if used >= DEMO_TOKENS:
            break
    system = "Answer the question from the documents in a few words. Examples:\n\n" + "\n".join(demos)
    out = []
    for ex in examples:
        docs = clip(engine, "\n".join(f"{p['title']}: {p['text']}" for p in ex["paragraphs"]), DOC_TOKENS)
        user = f"Documents:\n{docs}\n\nQuestion: {ex['question']}\nAnswer:"
        out.append([{"role": "system", "content": system}, {"role": "user", "content": user}])
    return out


def short_messages(engine, examples: list[dict]) -> list[list[dict]]:
    out = []
    for ex in examples:
        gold = next(p for p in ex["paragraphs"] if p["is_supporting"])
        doc = clip(engine, f"{gold['title']}: {gold['text']}", SHORT_TOKENS - 80)
        out.append([{"role": "user", "content": f"Document: {doc}\nQuestion: {ex['question']}\nAnswer briefly:"}])
    return out


def model_speed(
    model, tokenizer, examples: list[dict], batch: int, length: int = 512, steps: int = 32
) -> tuple[float, float]:
    """(prefill, decode) tokens/s of the bare model on ``batch`` rows of ``length`` tokens: the prefill one
    transformers forward pass into the engine's KV buffers, each decode step the engine's own (``decoder.Decoder``,
    the way ``auto`` picks for the model)."""
    import torch

    from ragscale.process import release_openmp_threads
    from ragscale.programs.lm.kv import buffer_cache

    decoder = decoder_for(model)
    text = " ".join(p["text"] for ex in examples for p in ex["paragraphs"])
    ids = tokenizer(text, add_special_tokens=False).input_ids
    rows = torch.tensor([ids[i * length : (i + 1) * length] for i in range(batch)], device=model.device)
    # a GPU runs its kernels asynchronously: wait for them before each clock is read
    sync = torch.cuda.synchronize if model.device.type == "cuda" else (lambda: None)
    with torch.inference_mode():
        cache = buffer_cache(model, batch, length + steps + 1)
        mask = torch.ones((batch, length), dtype=torch.long, device=model.device)
        positions = torch.full((batch, 1), length, device=model.device)
        sync()
        start = time.perf_counter()
        out = model(input_ids=rows, past_key_values=cache, use_cache=True, logits_to_keep=1)
        sync()
        prefill = time.perf_counter() - start
        logits = out.logits[:, -1]
        start = time.perf_counter()
        for _ in range(steps):
            mask = torch.cat([mask, mask.new_ones((batch, 1))], dim=-1)
            feed = logits.argmax(-1)[:, None]
            feed.tolist()  # the engine reads the chosen tokens on the host every step
            logits = decoder(feed, mask, positions, cache)
            positions = positions + 1
        sync()
        decode = time.perf_counter() - start
    release_openmp_threads()  # the engine's worker runs the model next; see ragscale.process
    return batch * length / prefill, batch * steps / decode


_DECODERS: dict = {}


def decoder_for(model):
    """The engine's decoder for ``model`` (its way from ``$RAGSCALE_DECODE`` or ``auto``), made once per model: a
    compiled step compiles on its first use, in the untimed warm-up."""
    from ragscale.programs.lm.decoder import Decoder
    from ragscale.programs.lm.engine import decode_way

    if id(model) not in _DECODERS:
        _DECODERS[id(model)] = Decoder(model, decode_way())
    return _DECODERS[id(model)]


def warm_up(model, tokenizer, examples: list[dict], batches) -> None:
    """Run each timed shape once, untimed: the first pass of a shape pays one-time costs (oneDNN builds a kernel
    for it, the allocator maps fresh pages) that made the first layout of a run look up to 1.5x slower."""
    decoder_for(model).compile_now()
    for batch in batches:
        model_speed(model, tokenizer, examples, batch, steps=4)


def layout_speeds(model: str, layouts: list[str], examples: list[dict]) -> dict:
    """Prefill (batch 1) and decode (1 and 8 rows) tokens/s of ``model`` in each weight layout, loaded in turn; a
    layout may name the way its decode steps run after a colon (``int8-bf16:hf``; ``decoder.DECODE_WAYS``)."""
    from ragscale.programs.lm.decoder import Decoder
    from ragscale.programs.lm.models import load_model

    out = {}
    for layout in layouts:
        weights, _, way = layout.partition(":")
        loaded, tokenizer = load_model(model, weights=weights)
        if way:
            _DECODERS[id(loaded)] = Decoder(loaded, way)
        warm_up(loaded, tokenizer, examples, (1, 8))
        prefill, one = model_speed(loaded, tokenizer, examples, 1)
        _, eight = model_speed(loaded, tokenizer, examples, 8)
        out[layout] = {
            "prefill_tok_s": round(prefill, 1),
            "decode_tok_s": {"1": round(one, 1), "8": round(eight, 1)},
            "decode": decoder_for(loaded).way,
        }
        _DECODERS.pop(id(loaded), None)
        del loaded
    return out


def device_name(model) -> str:
    """The GPU's name, or the CPU's model (family and model numbers) where the model runs on the CPU."""
    import torch

    from ragscale.programs.lm.layouts import cpu_model

    return torch.cuda.get_device_name(model.device) if model.device.type == "cuda" else f"cpu: {cpu_model()}"


def llama_bench(binary: Path, model: str, threads: int) -> dict:
    """llama.cpp's prefill (512 tokens) and one-row decode (32 tokens) tokens/s on the model's GGUF file."""
    import subprocess

    from ragscale.programs.lm.models import resolve

    gguf = resolve(model)
    command = [str(binary), "-m", str(gguf), "-p", "512", "-n", "32", "-t", str(threads), "-o", "json"]
    records = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    prefill = next(r["avg_ts"] for r in records if r["n_prompt"] > 0 and r["n_gen"] == 0)
    decode = next(r["avg_ts"] for r in records if r["n_gen"] > 0 and r["n_prompt"] == 0)
    return {"prefill_tok_s": round(prefill, 1), "decode_tok_s": {"1": round(decode, 1)}, "gguf": gguf.name}


def without_prefix_cache(lm):
    """The same model behind a second engine that recomputes every prompt (the baseline of the prefix cache)."""
    from ragscale.programs.lm.engine import TorchEngine

    engine = TorchEngine(lm.engine.model, lm.engine.tokenizer, name=lm.engine.name, prefix_cache=False)
    return lm.copy(engine=engine)


def questions_per_minute(lm, prompts: list[list[dict]], threads: int) -> float:
    from ragscale.programs.lm import chat

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda messages: chat(lm, messages), prompts))
    return len(prompts) * 60 / (time.perf_counter() - start)


def timed(lm, prompts: list[list[dict]], threads: int, warm: list[dict]) -> tuple[float, dict]:
    """Questions per minute, and the engine's work meanwhile (seconds of prefill and decode, steps, rows, prompt
    tokens sent and computed). The prefix cache is emptied and then holds only ``warm`` (an unmeasured question
    after the shared demonstrations), so no run is served the prompts an earlier run computed."""
    from ragscale.programs.lm import chat

    engine = lm.engine
    if engine.prefixes is not None:
        engine.prefixes.clear()
    chat(lm, warm)
    before = {**engine.work, "sent": engine.prompt_tokens, "computed": engine.computed_tokens}
    qpm = questions_per_minute(lm, prompts, threads)
    after = {**engine.work, "sent": engine.prompt_tokens, "computed": engine.computed_tokens}
    return qpm, {k: after[k] - before.get(k, 0) for k in ("prefill", "decode", "steps", "rows", "sent", "computed")}


def ideal_speedup(one: dict, eight: dict, batch: int = 8) -> float:
    """8 threads against 1 if every decode step ran a full batch at the step cost measured with 8 threads.

    Prefill is compute-bound, so its seconds do not shrink with batching; decoding shrinks to ``rows / batch``
    steps. A measured speed-up close to this is the engine doing what the hardware allows.
    """
    step = eight["decode"] / max(eight["steps"], 1)
    return (one["prefill"] + one["decode"]) / (eight["prefill"] + one["rows"] / batch * step)


def bound_speedup(one: dict, eight: dict) -> float:
    """8 threads against 1 if decoding cost 8 threads nothing: their prefill alone against all of one thread's work."""
    return (one["prefill"] + one["decode"]) / eight["prefill"]


def prepare_process(name: str, torch_threads: int | None) -> None:
    """What a throughput benchmark's process sets before it loads anything: ragscale's own set-up (the offline
    environment, the C heap's limits, warnings-only logging), no progress bars, a DSPy cache of its own (empty:
    every answer computed), quiet deprecation warnings, torch's threads."""
    import logging
    import tempfile
    import warnings

    from ragscale import process

    process.prepare_process(logging.WARNING)
    os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ["DSPY_CACHEDIR"] = tempfile.mkdtemp(prefix=f"{name}-dspy-cache-")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    import torch

    if torch_threads:
        torch.set_num_threads(torch_threads)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="preset, model directory or .gguf file")
    parser.add_argument("--limit", type=int, default=16, help="questions per questions-per-minute measurement")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--torch-threads", type=int, help="torch intra-op threads (1 is faster on a loaded machine)")
    parser.add_argument("--baseline", action="store_true", help="also time DRAG at 1 thread with no prefix cache")
    parser.add_argument("--weights", help="the engine's weight layout (default: load_model's)")
    parser.add_argument(
        "--layouts", default="fp32,int8,bf16,int8-bf16", help="weight layouts timed side by side ('' for none)"
    )
    parser.add_argument("--llama-bench", type=Path, help="a llama.cpp llama-bench binary: its figures on the GGUF")
    args = parser.parse_args(argv)
    from ragscale.programs.lm.models import WEIGHTS

    layouts = [w.strip() for w in args.layouts.split(",") if w.strip()]
    from ragscale.programs.lm.decoder import DECODE_WAYS

    for layout in [*layouts, args.weights or "fp32"]:
        weights, _, way = layout.partition(":")
        if weights not in WEIGHTS or way not in ("", *DECODE_WAYS):
            parser.error(
                f"unknown weight layout {layout!r}; valid choices: {', '.join(WEIGHTS)}, each with an optional "
                f":WAY of {', '.join(DECODE_WAYS)}"
            )
    if args.llama_bench is not None and not args.llama_bench.is_file():
        parser.error(f"--llama-bench {str(args.llama_bench)!r} is not a file")

    prepare_process("lm-throughput", args.torch_threads)
    import torch

    from ragscale.programs.lm import load_lm
    from ragscale.programs.lm.layouts import cpu_flags

    examples = dev_examples()

    side_by_side = layout_speeds(args.model, layouts, examples)
    anchor = llama_bench(args.llama_bench, args.model, torch.get_num_threads()) if args.llama_bench else None
    lm = load_lm(args.model, cache=False, max_tokens=MAX_OUTPUT, weights=args.weights)
    engine = lm.engine
    measured, demo_pool = examples[: args.limit], examples[-60:]
    warm_up(engine.model, engine.tokenizer, examples, (1, 4, 8))
    engine.batcher.decoder.compile_now()  # timed as a long run decodes, compiled (inductor's cache has it)
    speeds = {b: model_speed(engine.model, engine.tokenizer, examples, b) for b in (1, 4, 8)}
    short, drag = short_messages(engine, measured), drag_messages(engine, measured, demo_pool)
    unmeasured = examples[args.limit : args.limit + 1]
    warm = {"short": short_messages(engine, unmeasured)[0], "drag": drag_messages(engine, unmeasured, demo_pool)[0]}
    no_prefix = questions_per_minute(without_prefix_cache(lm), drag, 1) if args.baseline else None
    runs = {
        name: {t: timed(lm, prompts, t, warm[name]) for t in (1, 8)}
        for name, prompts in (("short", short), ("drag", drag))
    }
    qpm = {name: {t: run[0] for t, run in by_threads.items()} for name, by_threads in runs.items()}
    result = {
        "model": args.model,
        "prefill_tok_s": {str(b): round(s[0], 1) for b, s in speeds.items()},
        "decode_tok_s": {str(b): round(s[1], 1) for b, s in speeds.items()},
        "questions_per_minute": {str(t): round(v, 2) for t, v in qpm["drag"].items()},
        "short_questions_per_minute": {str(t): round(v, 2) for t, v in qpm["short"].items()},
        "work": {name: {str(t): run[1] for t, run in by_threads.items()} for name, by_threads in runs.items()},
        "weights": engine.model.weight_layout,
        "decode": engine.batcher.decoder.way,
        "device": device_name(engine.model),
        "cpu_flags": sorted(f for f in cpu_flags() if f.startswith(("avx512", "amx", "avx2", "avx_vnni"))),
        "torch_threads": torch.get_num_threads(),
        "step_ms": {str(b): round(1000 * b / s[1], 2) for b, s in speeds.items()},
        "layouts": side_by_side,
        **({"llama_cpp": anchor} if anchor else {}),
    }
    tokens = {
        name: sum(engine.count_tokens(engine.render_messages(m)) for m in p) / len(p)
        for name, p in (("short", short), ("drag", drag))
    }
    print(
        f"model {args.model}, {len(measured)} HotpotQA dev questions, max_tokens={MAX_OUTPUT}, "
        f"torch threads {torch.get_num_threads()}, engine weights {result['weights']}, decode {result['decode']}, "
        f"device {result['device']}"
    )
    rows = dict(side_by_side, **({"llama.cpp " + anchor["gguf"]: anchor} if anchor else {}))
    if rows:
        reference = side_by_side.get("fp32")
        header = ("weights", "prefill tok/s", "decode 1 row", "decode 8 rows", "vs fp32 (prefill/1 row)")
        print(" ".join(f"{h:>{w}}" for h, w in zip(header, (28, 14, 13, 14, 24), strict=True)))
        for name, r in rows.items():
            versus = ""
            if reference:
                versus = (f"{r['prefill_tok_s'] / reference['prefill_tok_s']:.2f}x / "
                          f"{r['decode_tok_s']['1'] / reference['decode_tok_s']['1']:.2f}x")  # fmt: skip
            eight = r["decode_tok_s"].get("8", "")
            print(f"{name:>28} {r['prefill_tok_s']:>14} {r['decode_tok_s']['1']:>13} {eight:>14} {versus:>24}")
    print(f"{'batch':>6} {'prefill tok/s':>14} {'decode tok/s':>13} {'ms/step':>8}")
    for b in (1, 4, 8):
        print(f"{b:>6} {result['prefill_tok_s'][str(b)]:>14} {result['decode_tok_s'][str(b)]:>13} "
              f"{result['step_ms'][str(b)]:>8}")  # fmt: skip
    print(f"{'prompt':>26} {'1 thread q/min':>15} {'8 threads q/min':>16} {'speed-up':>9}")
    for name, key in (("short", "short_questions_per_minute"), ("drag", "questions_per_minute")):
        one, eight = result[key]["1"], result[key]["8"]
        label = f"{name} (~{tokens[name]:.0f} tokens)"
        print(f"{label:>26} {one:>15} {eight:>16} {eight / one:>8.2f}x")
    print(
        f"{'prompt':>26} {'threads':>7} {'prefill s':>9} {'decode s':>8} {'steps':>6} {'mean batch':>10} "
        f"{'ms/step':>8} {'ideal speed-up':>14} {'bound':>6} {'prompt tokens computed/sent':>28}"
    )
    for name in ("short", "drag"):
        for t in (1, 8):
            w = runs[name][t][1]
            ideal = f"{ideal_speedup(runs[name][1][1], w):.2f}x" if t == 8 else ""
            bound = f"{bound_speedup(runs[name][1][1], w):.2f}x" if t == 8 else ""
            print(
                f"{name:>26} {t:>7} {w['prefill']:>9.2f} {w['decode']:>8.2f} {w['steps']:>6} "
                f"{w['rows'] / max(w['steps'], 1):>10.2f} {1000 * w['decode'] / max(w['steps'], 1):>8.1f} {ideal:>14} "
                f"{bound:>6} {w['computed']:>13,}/{w['sent']:<14,}"
            )
    if no_prefix is not None:
        gain = result["questions_per_minute"]["8"] / no_prefix
        print(f"{'drag, no prefix cache':>26} {no_prefix:>15.2f} {'(8 threads vs this)':>16} {gain:>8.2f}x")
    print(f"prefills run (rows: count): {dict(sorted(engine.batch_sizes.items()))}, joined mid-batch: {engine.joined}")
    if args.json:
        write_json(args.json, result, indent=2)
    return result


if __name__ == "__main__":
    main()
