"""What one decode step of the bare model costs at 1-8 rows, outside the engine, and where its time goes.

    python benchmarks/decode_step.py --model qwen2.5-coder-0.5b --lengths 600 --steps hf,static,compiled
    python benchmarks/decode_step.py --model DIR --device cuda --profile runs/decode-step-profile

For each way of running a step (``--steps``) and each cache length L (the tokens already in every row's KV cache),
rows of one random prefix are laid out in the engine's in-place KV buffers (``kv.BufferLayer``) and ``--repeat``
single-token steps are timed at 1, 2, 4 and 8 rows; the table gives the median ms per step and its ratio to one
row. The ways:

- ``hf``: transformers' forward pass, what the engine ran before its own step;
- ``static``: the engine's decode step (``programs/lm/step.py``), eager;
- ``compiled``: the same step through ``torch.compile`` (the engine's default on a CPU where it pays);
- ``static-nograph``, ``compiled-nograph``: on a GPU, the step launched kernel by kernel, not replayed as a CUDA
  graph (``programs/lm/graphs.py``) as the engine runs it there.

``--profile DIR`` also records torch's profiler over a few one-row steps of each way, writes each as a Chrome
trace (``DIR/<way>.json``, open it in Perfetto or ``chrome://tracing``) and prints the operators that take the
step's time. ``--json`` writes the table with the device, the CPU and the date.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import date
from pathlib import Path

ROWS = (1, 2, 4, 8)
WAYS = ("hf", "static", "compiled", "static-nograph", "compiled-nograph")


def prefix_cache(model, rows: int, length: int, room: int):
    """A cache of ``BufferLayer``s holding ``length`` random tokens in ``rows`` rows, with ``room`` more columns."""
    import torch

    from ragscale.programs.lm.kv import buffer_cache

    cache = buffer_cache(model, rows, length + room)
    ids = torch.randint(100, 10_000, (rows, length), device=model.device)
    model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    return cache


def stepper(model, way: str):
    """A function running one step of ``way`` on (cache, feed, positions, mask) and returning the logits: the
    engine's ``Decoder``, told to take that way at every row count."""
    from ragscale.programs.lm.decoder import Decoder
    from ragscale.programs.lm.step import BUCKETS

    bare = way.removesuffix("-nograph")
    decoder = Decoder(model, bare, graphs=False if bare != way else None)
    decoder.max_rows, decoder.buckets = BUCKETS[-1], list(BUCKETS)
    decoder.compile_now()  # every row count timed compiled from its first step

    def run(cache, feed, positions, mask):
        return decoder(feed[:, None], mask.long(), positions[:, None], cache)

    return run


def time_steps(model, run, rows: int, length: int, repeat: int, sync) -> float:
    """Median ms of one step of ``run`` at ``rows`` rows whose caches hold ``length`` tokens (3 untimed first)."""
    import torch

    cache = prefix_cache(model, rows, length, repeat + 8)
    mask = torch.ones((rows, length), dtype=torch.bool, device=model.device)
    feed = torch.randint(100, 10_000, (rows,), device=model.device)
    positions = torch.full((rows,), length, device=model.device)
    times = []
    for i in range(repeat + 3):
        sync()
        start = time.perf_counter()
        mask = torch.cat([mask, mask.new_ones((rows, 1))], dim=-1)
        feed = run(cache, feed, positions, mask).argmax(-1)
        feed.tolist()  # the engine reads the chosen tokens on the host every step
        if i >= 3:
            times.append(time.perf_counter() - start)
        positions = positions + 1
    return 1000 * statistics.median(times)


def profile(model, run, length: int, out: Path, name: str, sync) -> list[dict]:
    """Profile five one-row steps of ``run``; write the Chrome trace; the operators by self time."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    cache = prefix_cache(model, 1, length, 16)
    mask = torch.ones((1, length), dtype=torch.bool, device=model.device)
    feed, positions = torch.tensor([100], device=model.device), torch.tensor([length], device=model.device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if model.device.type == "cuda" else [])
    for _ in range(3):  # warm: a compiled step compiles here, not under the profiler
        mask = torch.cat([mask, mask.new_ones((1, 1))], dim=-1)
        feed = run(cache, feed, positions, mask).argmax(-1)
        positions = positions + 1
    sync()
    with torch_profile(activities=activities) as prof:
        for _ in range(5):
            mask = torch.cat([mask, mask.new_ones((1, 1))], dim=-1)
            feed = run(cache, feed, positions, mask).argmax(-1)
            feed.tolist()
            positions = positions + 1
        sync()
    out.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(out / f"{name}.json"))
    device_time = "self_device_time_total" if model.device.type == "cuda" else "self_cpu_time_total"
    events = sorted(prof.key_averages(), key=lambda e: getattr(e, device_time), reverse=True)
    total = sum(getattr(e, device_time) for e in events) or 1
    top = [
        {"op": e.key, "ms_per_step": getattr(e, device_time) / 5 / 1000, "share": getattr(e, device_time) / total,
         "calls_per_step": e.count / 5}
        for e in events[:12]
    ]  # fmt: skip
    print(f"\n{name}: where one step's {'GPU' if model.device.type == 'cuda' else 'CPU'} time goes (self time)")
    for row in top:
        op, ms, share, calls = row["op"][:60], row["ms_per_step"], row["share"], row["calls_per_step"]
        print(f"  {op:<60} {ms:>8.2f} ms {share:>6.1%} {calls:>7.0f} calls")
    return top


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="preset, model directory or .gguf file")
    parser.add_argument("--weights", help="weight layout (default: load_model's for the device)")
    parser.add_argument("--device", help="cpu or cuda (default: load_model's)")
    parser.add_argument("--lengths", default="600", help="comma-separated KV cache lengths")
    parser.add_argument("--repeat", type=int, default=16, help="decode steps timed per row count")
    parser.add_argument("--steps", default=",".join(WAYS), help=f"comma-separated ways to step: {', '.join(WAYS)}")
    parser.add_argument("--rows", default=",".join(map(str, ROWS)), help="comma-separated row counts")
    parser.add_argument("--profile", type=Path, help="write a profiler trace of each way here")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    ways = [w.strip() for w in args.steps.split(",") if w.strip()]
    for way in ways:
        if way not in WAYS:
            parser.error(f"--steps: unknown way {way!r}; valid: {', '.join(WAYS)}")
    rows_list = [int(r) for r in args.rows.split(",")]

    import torch

    from ragscale.experiments.files import write_json
    from ragscale.programs.lm.layouts import cpu_flags, cpu_model
    from ragscale.programs.lm.models import load_model

    model, _ = load_model(args.model, device=args.device, weights=args.weights)
    sync = torch.cuda.synchronize if model.device.type == "cuda" else (lambda: None)
    device = torch.cuda.get_device_name() if model.device.type == "cuda" else "cpu"
    results: dict[str, dict[int, dict[int, float]]] = {}
    profiles = {}
    with torch.inference_mode():
        for way in ways:
            run = stepper(model, way)
            results[way] = {}
            for length in [int(n) for n in args.lengths.split(",")]:
                results[way][length] = {r: time_steps(model, run, r, length, args.repeat, sync) for r in rows_list}
            if args.profile:
                profiles[way] = profile(model, run, int(args.lengths.split(",")[0]), args.profile, way, sync)
    cpu = cpu_model()
    flags = sorted(f for f in cpu_flags() if f.startswith(("avx512", "amx", "avx2", "avx_vnni")))
    print(f"\nmodel {args.model}, weights {getattr(model, 'weight_layout', None)}, device {device}, CPU {cpu}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, median of {args.repeat} steps")
    header = " ".join(f"{f'{r} rows ms':>10}" for r in rows_list)
    print(f"{'step':>8} {'cache length':>12} {header}  {rows_list[-1]} rows / 1 row")
    for way, by_length in results.items():
        for length, row in by_length.items():
            times = " ".join(f"{row[r]:>10.2f}" for r in rows_list)
            print(f"{way:>8} {length:>12} {times}  {row[rows_list[-1]] / row[rows_list[0]]:>13.2f}x")
    result = {
        "model": args.model,
        "weights": getattr(model, "weight_layout", None),
        "device": device,
        "cpu": cpu,
        "cpu_flags": flags,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "date": date.today().isoformat(),
        "step_ms": {
            w: {str(n): {str(r): round(ms, 3) for r, ms in rs.items()} for n, rs in by.items()}
            for w, by in results.items()
        },
        **({"profile": profiles} if profiles else {}),
    }
    if args.json:
        write_json(args.json, result, indent=2)
    return result


if __name__ == "__main__":
    main()
