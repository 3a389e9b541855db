"""How fast the multi-call methods run on the engine before and after its speed-ups: the methods-speed table.

    python benchmarks/methods_speed.py [--limit 50] [--threads 4] [--lm qwen2.5-coder-0.5b] [--weights auto]
                                       [--methods rag,drag,iterdrag,ircot] [--out-dir runs/methods-speed]

Each method runs through ``run_experiment`` (as ``ragscale run``: hybrid retrieval over the paragraphs of the run's
questions, k = 5) on the first ``--limit`` HotpotQA dev questions at ``--threads`` threads, DSPy's cache off, on two
engines: "before", float32 weights behind an engine that recomputes every prompt (the engine without a low-bit
layout or prefix reuse), and "after", the weights of ``--weights`` (default: ``load_model``'s) behind the engine as
it runs by default (the radix tree of computed prefixes, emptied before the run). DRAG and IterDRAG get labelled
demonstrations (``--optimizer labeled``: documents retrieved for gold answers, no LM call to compile), so their
prompts carry the shared demonstrations the cache is for; RAG and IRCoT run uncompiled. Per run: questions per
minute (evaluation alone), the prompt tokens the engine was sent and those it computed, LM calls and EM (greedy
answers: a layout or the cache changes an answer only where the logits are close, and EM shows it).

Each cell is written to ``<out-dir>/<method>__<weights>__<cache>.json`` as it finishes and a rerun skips the cells
that exist, so an interrupted benchmark resumes. The table ends with the CPU it ran on. Timings need a quiet CPU:
run one benchmark at a time.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ragscale.experiments.files import write_json

METHODS = ("rag", "drag", "iterdrag", "ircot")
OPTIMIZER = {"drag": "labeled", "iterdrag": "labeled"}


def cpu_line() -> str:
    """The CPU's model name, family and model numbers, and the flags the engine chooses by."""
    from ragscale.programs.lm.layouts import cpu_flags

    fields: dict[str, str] = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16")
    flags = ", ".join(flag for flag in wanted if flag in cpu_flags()) or "no AVX2"
    name, family, model = fields.get("model name", "unknown CPU"), fields.get("cpu family"), fields.get("model")
    return f"{name} (family {family} model {model}); {flags}"


def measure(config, lm, *, cache: bool) -> dict:
    """One run of ``config`` on ``lm`` (its prefix cache emptied, or an engine without one), with the engine's
    prompt tokens sent and computed during it."""
    from ragscale.experiments.runner import run_experiment
    from ragscale.programs.lm.engine import TorchEngine

    if cache:
        engine = lm.engine
        engine.prefixes.clear()
    else:
        engine = TorchEngine(lm.engine.model, lm.engine.tokenizer, name=lm.engine.name, prefix_cache=False)
        lm = lm.copy(engine=engine)
    sent, computed = engine.prompt_tokens, engine.computed_tokens
    summary = run_experiment(config, lm=lm, check_context=True, progress=False, fresh=True)
    summary["prompt_tokens_sent"] = engine.prompt_tokens - sent
    summary["prompt_tokens_computed"] = engine.computed_tokens - computed
    return summary


def table(cells: list[dict]) -> str:
    lines = [
        "| method | optimizer | weights | prefix cache | EM | LM calls / q | q / min | prompt tokens computed / sent "
        "| share |",
        "|---|---|---|---|--:|--:|--:|--:|--:|",
    ]
    for cell in cells:
        sent, computed = cell["prompt_tokens_sent"], cell["prompt_tokens_computed"]
        lines.append(
            f"| {cell['method']} | {cell['optimizer']} | {cell['weights']} | {cell['prefix_cache']} | "
            f"{cell['em']:.1f} | "
            f"{cell['lm_calls_per_question']:.2f} | {cell['questions_per_minute']:.1f} | {computed:,} / {sent:,} | "
            f"{100 * computed / max(sent, 1):.0f}% |"
        )
    return "\n".join(lines)


def speedups(cells: list[dict]) -> str:
    """Each method's questions per minute after against before, from the same run of the script."""
    by_key = {(c["method"], c["prefix_cache"]): c for c in cells}
    parts = []
    for method in dict.fromkeys(c["method"] for c in cells):
        after, before = by_key.get((method, "on")), by_key.get((method, "off"))
        if after and before and before["questions_per_minute"]:
            parts.append(f"{method} {after['questions_per_minute'] / before['questions_per_minute']:.2f}x")
    return "questions/min, after vs before: " + (", ".join(parts) or "n/a")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=50, help="HotpotQA dev questions (default 50)")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--lm", default="qwen2.5-coder-0.5b")
    parser.add_argument("--weights", help="the weight layout after (default: load_model's); before is fp32")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--out-dir", type=Path, default=Path("runs/methods-speed"))
    parser.add_argument("--json", type=Path, help="also write every cell as one JSON list")
    args = parser.parse_args(argv)

    from ragscale.process import prepare_process

    prepare_process()
    from ragscale.experiments.config import RunConfig
    from ragscale.experiments.parts import load_lm_for
    from ragscale.programs import PROGRAMS
    from ragscale.programs.lm.models import WEIGHTS, layout_for, pick_device_dtype

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in PROGRAMS]
    if not methods or unknown:
        parser.error(f"--methods {args.methods!r}: give some of {', '.join(PROGRAMS)}")
    if args.weights not in (None, *WEIGHTS):
        parser.error(f"--weights {args.weights!r}: give one of {', '.join(WEIGHTS)}")
    after = layout_for(args.weights, *pick_device_dtype())
    args.out_dir.mkdir(parents=True, exist_ok=True)
    lms, cells = {}, []
    for method in methods:
        for weights, cache in (("fp32", False), (after, True)):
            path = args.out_dir / f"{method}__{weights}__{'on' if cache else 'off'}.json"
            if path.exists():
                cells.append(json.loads(path.read_text(encoding="utf-8")))
                continue
            config = RunConfig(
                method=method, dataset="hotpotqa", optimizer=OPTIMIZER.get(method, "none"), lm=args.lm,
                limit=args.limit, train_limit=16, shots=2, docs_per_demo=3, threads=args.threads,
                runs_dir=args.out_dir / "runs", cache=False, weights=weights,
            )  # fmt: skip
            lms[weights] = lms.get(weights) or load_lm_for(config)
            start = time.perf_counter()
            cell = measure(config, lms[weights], cache=cache)
            cell.update(
                weights=weights, prefix_cache="on" if cache else "off",
                benchmark_wall_s=round(time.perf_counter() - start, 1),
            )  # fmt: skip
            write_json(path, cell, indent=2)
            cells.append(cell)
            print(table(cells[-1:]).splitlines()[-1], flush=True)
    print()
    print(table(cells))
    print(f"\n{speedups(cells)}\n{args.limit} HotpotQA dev questions, {args.threads} threads, {args.lm}; {cpu_line()}")
    if args.json:
        write_json(args.json, cells, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
