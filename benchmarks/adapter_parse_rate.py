"""How often does FieldAdapter get a value of the right type out of a small local model?

Runs the Answer, Decompose and Grade signatures on HotpotQA dev questions with `FieldAdapter` and the model
from `load_lm`, DSPy's cache off, and prints the parse rate per signature, then the raw text of each failure.

- Answer: the question's supporting paragraphs plus up to --distractors others (distractors first, the most
  relevant last), each formatted "title: text".
- Decompose: twice per question, with no follow-ups and with one answered follow-up about a supporting paragraph
  ("Q: ... A: ...", as IterDRAG writes them).
- Grade: once per question, with a supporting paragraph (even questions) or a distractor (odd questions).

A parse is a value of the field's type: a str field that is empty or pure template markup counts as a failure
(FieldAdapter raises FieldParseError for it), as does any other exception.

    python benchmarks/adapter_parse_rate.py --model smollm2-135m --limit 100 --json runs/parse_rate.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ragscale.experiments.files import write_json

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DEV = REPO.parent / "shared" / "datasets" / "hotpotqa" / "dev.jsonl"
SIGNATURES = ("Answer", "Decompose", "Grade")


def read_questions(path: Path, limit: int) -> list[dict]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
            if len(rows) >= limit:
                break
    return rows


def _doc(p: dict) -> str:
    return f"{p['title']}: {p['text']}"


def _first_sentence(text: str) -> str:
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


def cases(row: dict, index: int, distractors: int) -> list[tuple[str, Any, dict]]:
    """(signature name, signature, inputs) for one question."""
    from ragscale.signatures import Answer, Decompose, Grade

    supporting = [p for p in row["paragraphs"] if p["is_supporting"]]
    others = [p for p in row["paragraphs"] if not p["is_supporting"]]
    documents = [_doc(p) for p in others[:distractors] + supporting]
    first = supporting[0]
    follow_up = f"Q: What is {first['title']}? A: {_first_sentence(first['text'])}"
    graded = supporting[0] if index % 2 == 0 or not others else others[0]
    q = row["question"]
    return [
        ("Answer", Answer, {"documents": documents, "question": q}),
        ("Decompose", Decompose, {"question": q, "follow_ups": []}),
        ("Decompose", Decompose, {"question": q, "follow_ups": [follow_up]}),
        ("Grade", Grade, {"question": q, "document": _doc(graded)}),
    ]


def run_case(signature, inputs: dict) -> tuple[bool, str]:
    """(parsed, detail): detail is the outputs when parsed, else the error with the raw text."""
    import dspy

    from ragscale.programs.lm.coerce import FieldParseError

    try:
        pred = dspy.Predict(signature)(**inputs)
    except FieldParseError as e:
        return False, f"{e.field}: {e.reason}: {e.raw!r}"
    except Exception as e:  # every failure is a failed question here, recorded with its type
        return False, f"{type(e).__name__}: {e}"
    return True, json.dumps(dict(pred.items()), ensure_ascii=False, default=str)


def measure(rows: list[dict], *, distractors: int, threads: int, show: Callable[[str], None]) -> dict[str, Any]:
    work = [(name, sig, inputs) for i, row in enumerate(rows) for name, sig, inputs in cases(row, i, distractors)]
    done = [0]
    lock = threading.Lock()

    tally = {s: [0, 0] for s in SIGNATURES}

    def one(case: tuple) -> tuple[bool, str]:
        result = run_case(case[1], case[2])
        with lock:
            done[0] += 1
            tally[case[0]][0] += result[0]
            tally[case[0]][1] += 1
            if done[0] % 20 == 0 or done[0] == len(work):
                running = ", ".join(f"{s} {p}/{n}" for s, (p, n) in tally.items())
                show(f"{done[0]}/{len(work)} cases; parsed so far: {running}")
        return result

    with ThreadPoolExecutor(max_workers=threads) as pool:
        results = list(pool.map(one, work))
    table: dict[str, dict[str, Any]] = {s: {"calls": 0, "parsed": 0, "failures": [], "samples": []} for s in SIGNATURES}
    for (name, _sig, inputs), (ok, detail) in zip(work, results, strict=True):
        entry = table[name]
        entry["calls"] += 1
        entry["parsed"] += ok
        if ok:
            entry["samples"].append(detail)
        else:
            entry["failures"].append((inputs.get("question", ""), detail))
    return table


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="load_lm name: preset, model path, openai/<m>")
    parser.add_argument("--api-base", default=None, help="OpenAI-compatible server URL for an openai/<model>")
    parser.add_argument("--limit", type=int, default=100, help="number of dev questions")
    parser.add_argument("--data", type=Path, default=DEFAULT_DEV, help="HotpotQA dev JSONL")
    parser.add_argument("--distractors", type=int, default=2, help="non-supporting paragraphs added for Answer")
    parser.add_argument("--threads", type=int, default=8, help="concurrent questions (the engine batches them)")
    parser.add_argument("--samples", type=int, default=3, help="parsed outputs to print per signature")
    parser.add_argument("--torch-threads", type=int, default=None, help="torch.set_num_threads (busy shared CPU: 1)")
    parser.add_argument("--json", type=Path, default=None, help="write {model, n, parse_rate} here")
    args = parser.parse_args(argv)

    from ragscale.process import prepare_process

    prepare_process(logging.WARNING)
    os.environ.setdefault("DSPY_CACHEDIR", tempfile.mkdtemp(prefix="ragscale-parse-rate-"))
    import dspy

    from ragscale.programs.lm import load_lm
    from ragscale.programs.lm.adapter import FieldAdapter

    if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    lm = load_lm(args.model, api_base=args.api_base, cache=False)
    dspy.configure(lm=lm, adapter=FieldAdapter())

    rows = read_questions(args.data, args.limit)
    start = time.perf_counter()
    table = measure(rows, distractors=args.distractors, threads=args.threads, show=lambda s: print(s, flush=True))
    elapsed = time.perf_counter() - start

    print(f"\nmodel {args.model}, {len(rows)} questions, {elapsed:.0f} s\n")
    print(f"| {'signature':<10} | {'calls':>5} | {'parsed':>6} | {'parse rate':>10} |")
    print(f"| {'-' * 10} | {'-' * 5}: | {'-' * 6}: | {'-' * 10}: |")
    rates = {}
    for name in SIGNATURES:
        entry = table[name]
        rates[name] = entry["parsed"] / entry["calls"] if entry["calls"] else 0.0
        print(f"| {name:<10} | {entry['calls']:>5} | {entry['parsed']:>6} | {rates[name]:>10.3f} |")
    for name in SIGNATURES:
        entry = table[name]
        if args.samples:
            print(f"\n{name}: sample parsed outputs")
            for detail in entry["samples"][: args.samples]:
                print(f"  {detail}")
        if entry["failures"]:
            print(f"\n{name}: {len(entry['failures'])} failures")
            for question, detail in entry["failures"]:
                print(f"  Q: {question}\n     {detail}")

    result = {"model": args.model, "n": len(rows), "parse_rate": rates}
    if args.json:
        write_json(args.json, result, indent=2)
    return result


if __name__ == "__main__":
    main()
