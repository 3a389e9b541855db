"""The engine against llama.cpp at the paper's context lengths: prefill, one-row decode after it, peak memory.

    LLAMA_BENCH=/path/to/llama-bench python benchmarks/engine_table.py
        [--models qwen2.5-coder-0.5b,qwen2.5-coder-1.5b] [--tokens 512,4096,16384,32768] [--chunks 512]
        [--json benchmarks/results/engine-table.json]

For each model and prompt length, in a process of its own (so that its peak resident memory is its own): the model
loaded as a run loads it (weights ``auto``), one prompt of random token ids (at most the context window less the
decoded tokens) prefilled as the engine prefills any prompt (in passes of ``--chunks`` tokens,
``batch.CHUNK_TOKENS`` by default), then 32 one-row decode steps after it with the compiled step (what a long run
decodes with). Beside it, where ``$LLAMA_BENCH`` names a ``llama-bench`` binary, llama.cpp on the model's GGUF
file with flash attention and the same threads: ``-fa on -p N -n 0`` for prefill and ``-fa on -p 0 -n 32 -d N``
for decoding after N tokens of context. Peak memory is each process's own (``wait4``), set beside the bound of
``docs/engine.md``: twice the weights as loaded plus the KV cache's bytes at the prompt's length; the JSON also
keeps the peak while loading and the peak of the prefill and decoding alone (``VmHWM``, reset after loading).

Every cell is written to the JSON as it ends, and a rerun skips the cells it holds (on another CPU it starts
afresh). Several ``--chunks`` measure the prefill's pass size.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

DECODE_STEPS = 32


def cell(model_name: str, tokens: int, chunk: int, weights: str = "auto") -> dict:
    """Prefill ``tokens`` random ids in passes of ``chunk``, then decode one row, with the linear layers in the
    layout ``weights``; run in a process of its own."""
    import torch

    from ragscale.process import prepare_process
    from ragscale.programs.lm.batch import Batcher, Job
    from ragscale.programs.lm.kv import position_bytes
    from ragscale.programs.lm.layouts import weight_bytes
    from ragscale.programs.lm.models import load_model

    prepare_process()
    model, tokenizer = load_model(model_name, weights=weights)
    batcher = Batcher(model, tokenizer, chunk_tokens=chunk)
    batcher.decoder.compile_now(rows=1)
    ids = torch.randint(100, 30_000, (tokens,), generator=torch.Generator().manual_seed(0)).tolist()
    loaded_gb = high_water_gb(reset=True)  # from here on, the peak of prefill and decoding alone
    with torch.inference_mode():
        batcher.start([Job(ids[:256], 1, 0.0, None, ())], running=True)  # untimed: first-pass costs
        began = time.perf_counter()
        running = batcher.start([Job(ids, DECODE_STEPS + 1, 0.0, None, ())], running=True)
        prefill_s = time.perf_counter() - began
        mask, positions, cache = running.mask, running.next_pos, running.cache
        logits, steps = running.logits, []
        for _ in range(DECODE_STEPS):  # its positions all within the context window
            began = time.perf_counter()
            mask = torch.cat([mask, mask.new_ones((1, 1))], dim=-1)
            feed = logits.argmax(-1)[:, None]
            feed.tolist()  # the engine reads the chosen token on the host every step
            logits = batcher.decoder(feed, mask, positions, cache)
            positions = positions + 1
            steps.append(time.perf_counter() - began)
    steps = sorted(steps[2:])  # the first two untimed: a first step's one-time costs
    return {
        "weights": model.weight_layout,
        "decode": batcher.decoder.way,
        "threads": torch.get_num_threads(),
        "prefill_tok_s": round(tokens / prefill_s, 1),
        "decode_tok_s": round(1 / steps[len(steps) // 2], 1),
        "loaded_peak_gb": round(loaded_gb, 2),
        "prefill_peak_gb": round(high_water_gb(), 2),
        "weights_gb": round(weight_bytes(model) / 1e9, 3),
        "kv_gb": round(position_bytes(model) * (tokens + DECODE_STEPS) / 1e9, 3),
    }


def context_window(model_name: str) -> int:
    """The model's context window, from its config (the engine refuses a prompt and its output past it)."""
    from ragscale.programs.lm.gguf_metadata import gguf_metadata
    from ragscale.programs.lm.models import cache_dir, resolve

    return int(gguf_metadata(resolve(model_name), cache_dir())[1]["max_position_embeddings"])


def high_water_gb(reset: bool = False) -> float:
    """This process's peak resident memory so far in GB (``VmHWM``); ``reset``: then start it again from the
    memory resident now (``/proc/self/clear_refs``)."""
    peak = next(line for line in open("/proc/self/status", encoding="ascii") if line.startswith("VmHWM"))
    if reset:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
            refs.write("5")
    return int(peak.split()[1]) * 1024 / 1e9


def in_process(command: list[str]) -> tuple[str, float]:
    """Run ``command``; its standard output and its own peak resident memory in GB (``wait4``)."""
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    out = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"{command[0]} exited {child.returncode}: {' '.join(command)}")
    return out, usage.ru_maxrss * 1024 / 1e9


def llama_cells(binary: str, model_name: str, tokens: int, threads: int) -> dict:
    """llama.cpp's prefill of ``tokens`` and its decode after them, with flash attention, and its peak memory."""
    from ragscale.programs.lm.models import resolve

    gguf = str(resolve(model_name))
    common = [binary, "-m", gguf, "-t", str(threads), "-fa", "on", "-o", "json", "-r", "1"]
    out, prefill_gb = in_process([*common, "-p", str(tokens), "-n", "0"])
    prefill = json.loads(out)[0]["avg_ts"]
    out, decode_gb = in_process([*common, "-p", "0", "-n", str(DECODE_STEPS), "-d", str(tokens)])
    decode = json.loads(out)[0]["avg_ts"]
    return {
        "gguf": Path(gguf).name,
        "prefill_tok_s": round(prefill, 1),
        "decode_tok_s": round(decode, 1),
        "peak_rss_gb": round(max(prefill_gb, decode_gb), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="qwen2.5-coder-0.5b,qwen2.5-coder-1.5b")
    parser.add_argument("--tokens", default="512,4096,16384,32768", help="prompt lengths, comma-separated")
    parser.add_argument("--chunks", default="", help="prefill pass sizes, comma-separated (default: the engine's)")
    parser.add_argument("--weights", default="auto", help="weight layout of the engine (models.WEIGHTS)")
    parser.add_argument("--json", dest="json_path", type=Path, default=Path("benchmarks/results/engine-table.json"))
    parser.add_argument("--cell", help=argparse.SUPPRESS)  # model,tokens,chunk: one cell, in this process
    args = parser.parse_args()
    if args.cell:
        name, tokens, chunk = args.cell.split(",")
        print(json.dumps(cell(name, int(tokens), int(chunk), args.weights)))
        return

    import torch

    from ragscale.experiments.files import write_json
    from ragscale.programs.lm.batch import CHUNK_TOKENS
    from ragscale.programs.lm.layouts import cpu_flags, cpu_model
    from ragscale.programs.lm.models import layout_for
    from ragscale.published.engine import table

    binary = os.environ.get("LLAMA_BENCH")
    if binary and not Path(binary).is_file():
        parser.error(f"$LLAMA_BENCH {binary!r} is not a file")
    chunks = [int(c) for c in args.chunks.split(",")] if args.chunks else [CHUNK_TOKENS]
    layout = layout_for(args.weights, "cpu", torch.float32)  # what a cell of this layout records
    machine = {
        "cpu": cpu_model(),
        "flags": sorted(cpu_flags() & {"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16"}),
    }
    done = json.loads(args.json_path.read_text()) if args.json_path.is_file() else {}
    if {k: done.get(k) for k in machine} != machine:
        done = {}
    rows = done.get("rows", [])
    threads = int(os.environ.get("OMP_NUM_THREADS") or min(os.cpu_count() or 1, 2))
    for name in args.models.split(","):
        longest = context_window(name) - DECODE_STEPS - 1  # the decoded tokens fit too
        for tokens in (min(int(t), longest) for t in args.tokens.split(",")):
            for chunk in chunks:
                key = {"model": name, "tokens": tokens, "chunk_tokens": chunk}
                if any(all(r[k] == v for k, v in key.items()) and r["weights"] == layout for r in rows):
                    continue
                load = os.getloadavg()[0]
                command = [sys.executable, __file__, "--cell", f"{name},{tokens},{chunk}", "--weights", args.weights]
                out, peak = in_process(command)
                row = {**key, **json.loads(out.strip().splitlines()[-1]), "peak_rss_gb": round(peak, 2)}
                if binary:
                    row["llama_cpp"] = llama_cells(binary, name, tokens, threads)
                row["load_before"], row["load_after"] = round(load, 2), round(os.getloadavg()[0], 2)
                rows.append(row)
                write_json(args.json_path, {**machine, "date": date.today().isoformat(), "rows": rows})
                print(table([row]).splitlines()[-1], flush=True)
    print(table(rows))


if __name__ == "__main__":
    main()
