"""Is transformers' own continuous batching as fast on CPU as ragscale's engine, for the same prompts?

    python benchmarks/continuous_batching.py --model qwen2.5-coder-0.5b --limit 8 [--device cuda]
                                             [--weights auto] [--max-batch-tokens 512,2048,8192] [--page-size 256]
                                             [--cb-weights LAYOUT] [--torch-threads N] [--json PATH]

transformers 5 batches requests of its own (``transformers/generation/continuous_batching/``):
``model.init_continuous_batching(generation_config, continuous_batching_config)`` returns a
``ContinuousBatchingManager`` whose background thread schedules the requests into forward passes of at most
``max_batch_tokens`` tokens (prompts split into chunks, decode steps of running requests in the same pass), over a
paged KV cache of pages of ``page_size`` tokens; a prompt takes the complete pages it shares with one seen before
from the cache. ``add_requests(token_ids)`` submits, ``get_result()`` hands back each finished request;
``model.generate_batch`` wraps the same with a new manager and cache per call. On a CPU the manager keeps ``sdpa``
attention, over a block-diagonal mask of the keys of every request in the pass (flash attention, its decode path
and CUDA graphs are GPU-only), uncompiled. It runs the model ragscale loads (``load_model``): the layers of the
weight layout are called like the ``nn.Linear`` they replace.

For the same HotpotQA dev questions as ``lm_throughput.py`` (short prompts and DRAG-shaped ones, greedy, at most
32 output tokens), in one process on one loaded model:

- ragscale's ``TorchEngine`` through DSPy from 1 and 8 threads (``lm_throughput.timed``: its prefix cache emptied,
  then given one unmeasured question);
- transformers' manager with every question submitted at once, for each ``--max-batch-tokens``: a fresh manager and
  cache per run, sized to hold every prompt and reply, given the same unmeasured question first (so it holds the
  shared demonstrations), then timed from messages to texts (chat template and tokenizer included, as they are in
  the engine's timing). Per request: seconds from submission to its first token and to its last.

The table gives questions per minute, output tokens per second (every reply's tokens, its end token included),
prompt tokens computed / sent (the rest came from cached prefixes or pages), and how many transformers replies are
the engine's text (its replies from 8 threads, taken in an untimed pass after the timed ones). A run that fails
(transformers without continuous batching, a manager that does not run on this CPU or this layout) is reported with
its error, not raised. ``--json`` (default ``runs/continuous-batching-<model>.json``) also records the device, the
CPU, torch's threads and the date. Timings on a shared machine are noisy: compare runs taken under the same load.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path

from lm_throughput import MAX_OUTPUT, dev_examples, drag_messages, prepare_process, short_messages, timed, warm_up

from ragscale.experiments.files import slug, write_json

MAX_BATCH_TOKENS = "512,2048,8192"
"""Token budgets of one transformers forward pass, each a run; 8192 is transformers' default."""
PAGE_SIZE = 256
"""Tokens per page of transformers' paged cache (its default): prompts share whole pages only."""


def end_tokens(model, tokenizer) -> list[int]:
    """The ids that end a reply, the engine's rule (``programs/lm/batch.py``): the tokenizer's and the model's end
    tokens and the usual end-of-turn ones, so that both sides stop on the same tokens."""
    ids = set()
    for source in (tokenizer.eos_token_id, getattr(model.generation_config, "eos_token_id", None)):
        ids.update(source if isinstance(source, list | tuple) else [source] if source is not None else [])
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|endoftext|>") if t in vocab)
    return sorted(ids)


def engine_lm(model, tokenizer, name: str):
    """A ``dspy.LM`` over a ``TorchEngine`` on the loaded ``model``, as ``load_lm`` builds one (DSPy's cache off)."""
    from ragscale.programs.lm.engine import TorchEngine
    from ragscale.programs.lm.meter import MeteredLM

    engine = TorchEngine(model, tokenizer, name=name)
    return MeteredLM(
        f"local/{name}",
        engine=engine,
        num_retries=0,
        context_window=engine.context_window,
        max_tokens=MAX_OUTPUT,
        temperature=0.0,
        cache=False,
    )


def engine_replies(lm, prompts: list[list[dict]], threads: int = 8) -> list[tuple[str, int]]:
    """The engine's reply text and output tokens (its end token included) for each prompt, asked from ``threads``."""
    from ragscale.programs.lm.prompt import chat_request

    def ask(messages: list[dict]) -> tuple[str, int]:
        response = lm(chat_request(lm, messages))
        return (response.text or "").strip(), response.usage.output_tokens

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(ask, prompts))


def prompt_ids(engine, messages: list[dict]) -> list[int]:
    """The token ids the engine feeds the model for ``messages``."""
    return engine.tokenizer(engine.render_messages(messages), add_special_tokens=False).input_ids


def count_prefix_matches(cache) -> list[int]:
    """The prompt tokens each request takes from cached pages, appended as the manager schedules it (wraps the
    cache's ``search_prefix_match``, which the scheduler calls once per new request)."""
    matched: list[int] = []
    search = cache.search_prefix_match

    def counted(request_id: str, prompt: list[int]) -> int:
        found = search(request_id, prompt)
        matched.append(found)
        return found

    cache.search_prefix_match = counted
    return matched


def submit(manager, prompts: list[list[int]]) -> list:
    """Submit ``prompts`` at once; their ``GenerationOutput``s in that order, once all are finished."""
    request_ids = manager.add_requests(prompts, max_new_tokens=MAX_OUTPUT, record_timestamps=True)
    done: dict = {}
    while len(done) < len(request_ids):
        result = manager.get_result(timeout=1)
        if result is None:
            if not manager.is_running():
                error = manager.background_thread_status.fatal_error
                raise RuntimeError(f"transformers' generation loop stopped ({error!r}) with requests unfinished")
            continue
        if result.is_finished():
            if result.error is not None:
                raise RuntimeError(f"transformers failed request {result.request_id}: {result.error}")
            done[result.request_id] = result
    return [done[r] for r in request_ids]


def transformers_run(model, engine, prompts: list[list[dict]], warm: list[dict], eos: list[int], budget: int,
                     page_size: int) -> dict:  # fmt: skip
    """``prompts`` submitted at once to a fresh manager on ``model`` that has served ``warm``: its figures, or the
    error it failed with."""
    try:
        return _transformers_run(model, engine, prompts, warm, eos, budget, page_size)
    except Exception as error:  # what does not run is a result here
        return {"max_batch_tokens": budget, "error": f"{type(error).__name__}: {error}"}


def _transformers_run(model, engine, prompts, warm, eos, budget, page_size) -> dict:
    from transformers import ContinuousBatchingConfig, GenerationConfig

    from ragscale.process import release_openmp_threads

    lengths = [len(prompt_ids(engine, m)) for m in [warm, *prompts]]
    # room for every prompt and reply at once (a page spare each), so no page is evicted or offloaded: left to
    # itself, the manager sizes its cache to 60% of the free RAM
    blocks = sum(math.ceil((n + MAX_OUTPUT) / page_size) + 1 for n in lengths)
    generation = GenerationConfig(do_sample=False, max_new_tokens=MAX_OUTPUT, eos_token_id=eos)
    config = ContinuousBatchingConfig(page_size=page_size, num_blocks=blocks, max_batch_tokens=budget)
    manager = model.init_continuous_batching(generation_config=generation, continuous_batching_config=config)
    try:
        manager.warmup()  # builds the paged cache and the batch processor (nothing to capture or compile on a CPU)
        release_openmp_threads()  # this thread's helpers (filling the cache) would slow the manager's thread
        matched = count_prefix_matches(manager.batch_processor.cache)
        manager.start()
        submit(manager, [prompt_ids(engine, warm)])
        attention = model.config._attn_implementation  # the manager's, while it runs
        matched.clear()
        passes = manager.current_batch
        start = time.perf_counter()
        ids = [prompt_ids(engine, m) for m in prompts]
        outputs = submit(manager, ids)
        texts = [engine.tokenizer.decode(o.generated_tokens, skip_special_tokens=True).strip() for o in outputs]
        seconds = time.perf_counter() - start
        passes = manager.current_batch - passes
        resolved = manager.continuous_batching_config
    finally:
        manager.stop(block=True)
        manager.destroy()
    sent, tokens = sum(len(i) for i in ids), sum(len(o.generated_tokens) for o in outputs)
    last = [o.lifespan[1] - o.created_time for o in outputs]
    first = [o.timestamps[0] - o.created_time for o in outputs if o.timestamps]
    return {
        "max_batch_tokens": resolved.max_batch_tokens,
        "page_size": resolved.page_size,
        "num_blocks": resolved.num_blocks,
        "attention": attention,
        "async_batching": resolved.use_async_batching,
        "cuda_graphs": list(resolved.use_cuda_graph),
        "compiled": resolved.varlen_compile_config is not None,
        "seconds": round(seconds, 3),
        "questions_per_minute": round(len(prompts) * 60 / seconds, 2),
        "output_tokens": tokens,
        "output_tok_s": round(tokens / seconds, 1),
        "forward_passes": passes,
        "prompt_tokens": {"sent": sent, "computed": sent - sum(matched)},
        "latency_s": {"mean": round(statistics.mean(last), 3), "max": round(max(last), 3)},
        "first_token_s": {"mean": round(statistics.mean(first), 3), "max": round(max(first), 3)} if first else None,
        "texts": texts,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="preset, model directory or .gguf file")
    parser.add_argument("--limit", type=int, default=8, help="questions per run")
    parser.add_argument("--device", default="cpu", help="where both sides run: cpu (default) or cuda")
    parser.add_argument("--weights", default="auto", help="weight layout of the model both sides run (default auto)")
    parser.add_argument(
        "--cb-weights", help="run transformers on a second copy of the model in this layout (default: the same model)"
    )
    parser.add_argument(
        "--max-batch-tokens", default=MAX_BATCH_TOKENS, help="comma-separated token budgets of a transformers pass"
    )
    parser.add_argument("--page-size", type=int, default=PAGE_SIZE, help="tokens per page of transformers' cache")
    parser.add_argument("--torch-threads", type=int, help="torch intra-op threads")
    parser.add_argument("--json", type=Path, help="write the results here (runs/continuous-batching-<model>.json)")
    args = parser.parse_args(argv)
    from ragscale.programs.lm.models import WEIGHTS

    for layout in (args.weights, args.cb_weights or args.weights):
        if layout not in WEIGHTS:
            parser.error(f"unknown weight layout {layout!r}; valid choices: {', '.join(WEIGHTS)}")
    try:
        budgets = [int(b) for b in args.max_batch_tokens.split(",") if b.strip()]
    except ValueError:
        parser.error(f"--max-batch-tokens {args.max_batch_tokens!r} is not a list of integers")
    if not budgets or min(budgets) < 1 or args.page_size < 4 or args.limit < 1:
        parser.error("--max-batch-tokens and --limit must be >= 1, --page-size >= 4 (transformers' minimum)")
    json_path = args.json or Path("runs") / f"continuous-batching-{slug(args.model)}.json"

    prepare_process("continuous-batching", args.torch_threads)
    import torch
    import transformers

    from ragscale.programs.lm.layouts import cpu_flags, cpu_model
    from ragscale.programs.lm.models import load_model

    model, tokenizer = load_model(args.model, device=args.device, weights=args.weights)
    cb_model = load_model(args.model, device=args.device, weights=args.cb_weights)[0] if args.cb_weights else model
    lm = engine_lm(model, tokenizer, args.model)
    engine = lm.engine
    examples = dev_examples()
    measured, demo_pool, unmeasured = examples[: args.limit], examples[-60:], examples[args.limit : args.limit + 1]
    prompts = {"short": short_messages(engine, measured), "drag": drag_messages(engine, measured, demo_pool)}
    warm = {"short": short_messages(engine, unmeasured)[0], "drag": drag_messages(engine, unmeasured, demo_pool)[0]}
    eos = end_tokens(model, tokenizer)
    for loaded in {id(m): m for m in (model, cb_model)}.values():
        warm_up(loaded, tokenizer, examples, (1, 8))

    runs: dict = {}
    for name, messages in prompts.items():
        ours = {}
        for threads in (1, 8):
            qpm, work = timed(lm, messages, threads, warm[name])
            ours[str(threads)] = {"seconds": round(len(messages) * 60 / qpm, 3), "questions_per_minute": round(qpm, 2),
                                  "work": work}  # fmt: skip
        replies = engine_replies(lm, messages)
        tokens = sum(n for _, n in replies)
        for run in ours.values():
            run["output_tokens"], run["output_tok_s"] = tokens, round(tokens / run["seconds"], 1)
        theirs = {}
        for budget in budgets:
            run = transformers_run(cb_model, engine, messages, warm[name], eos, budget, args.page_size)
            if "texts" in run:
                run["same_text"] = sum(a == b for a, (b, _) in zip(run["texts"], replies, strict=True))
            theirs[str(budget)] = run
        runs[name] = {
            "prompt_tokens_mean": round(sum(len(prompt_ids(engine, m)) for m in messages) / len(messages), 1),
            "ragscale": ours,
            "ragscale_texts": [text for text, _ in replies],
            "transformers": theirs,
        }
    engine.close()

    flags = sorted(f for f in cpu_flags() if f.startswith(("avx512", "amx", "avx2", "avx_vnni")))
    result = {
        "model": args.model,
        "questions": len(measured),
        "max_output_tokens": MAX_OUTPUT,
        "weights": {"ragscale": model.weight_layout, "transformers": cb_model.weight_layout},
        "device": str(model.device),
        "cpu": cpu_model(),
        "cpu_flags": flags,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads(),
        "date": date.today().isoformat(),
        "runs": runs,
    }
    print(
        f"\nmodel {args.model}, {len(measured)} HotpotQA dev questions, greedy, max_tokens={MAX_OUTPUT}; device "
        f"{result['device']}, CPU {result['cpu']}, torch {torch.__version__} ({result['threads']} threads), "
        f"transformers {transformers.__version__}; weights: ragscale {model.weight_layout}, transformers "
        f"{cb_model.weight_layout}"
    )
    header = ("prompt", "run", "q/min", "out tok/s", "vs engine 8t", "prompt tokens computed/sent", "same text",
              "first token s", "last token s")  # fmt: skip
    widths = (22, 30, 7, 9, 12, 27, 9, 13, 12)
    print(" ".join(f"{h:>{w}}" for h, w in zip(header, widths, strict=True)))
    for name, by in runs.items():
        label = f"{name} (~{by['prompt_tokens_mean']:.0f} tokens)"
        reference = by["ragscale"]["8"]["questions_per_minute"]
        for threads, run in by["ragscale"].items():
            work = run["work"]
            cells = (label, f"ragscale, {threads} thread{'s' if threads != '1' else ''}", run["questions_per_minute"],
                     run["output_tok_s"], f"{run['questions_per_minute'] / reference:.2f}x",
                     f"{work['computed']:,}/{work['sent']:,}", "", "", "")  # fmt: skip
            print(" ".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True)))
        for budget, run in by["transformers"].items():
            what = f"transformers, {budget} tok/pass"
            if "error" in run:
                print(f"{label:>22} {what:>30} failed: {run['error']}")
                continue
            first = run["first_token_s"]["mean"] if run["first_token_s"] else ""
            cells = (label, what, run["questions_per_minute"], run["output_tok_s"],
                     f"{run['questions_per_minute'] / reference:.2f}x",
                     f"{run['prompt_tokens']['computed']:,}/{run['prompt_tokens']['sent']:,}",
                     f"{run['same_text']}/{len(run['texts'])}", first, run["latency_s"]["mean"])  # fmt: skip
            print(" ".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True)))
    print("first/last token s: mean seconds from submission; same text: replies equal to the engine's from 8 threads")
    write_json(json_path, result, indent=2)
    print(f"wrote {json_path}")
    return result


if __name__ == "__main__":
    main()
