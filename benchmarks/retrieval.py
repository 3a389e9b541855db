"""Retrieval benchmark: dense (chromadb + MiniLM), BM25 and their RRF hybrid on a dataset's dev split.

The corpus is ``--corpus`` as a run takes it (``data/corpora.py``): the dataset's every paragraph (the default),
``all`` datasets pooled, or ``questions``, the union of the evaluated questions' paragraphs (the distractor
setting, where every gold paragraph is among a few thousand). Recall@k is the
fraction of a question's gold supporting titles found among the titles of the top k passages, averaged over
questions. Each retriever is asked once per question for k = 20 and recall@2/5/10 are read off that list (so
the hybrid's candidate depth is max(3 * 20, 20) = 60 per side).

Timings: the dense index is built from scratch in a fresh folder (embedding plus chromadb adds). The raw
embedder's passages/s is measured on a seeded sample of the corpus, one slice after each indexing batch (that
time is excluded from the build), so both rates see the same load on a shared machine; the time spent inside
``embed`` during the build is recorded too (``index_embed_share``). BM25 build covers tokenising, BM25Okapi
and writing the JSON; BM25 load is reopening that JSON. Query latency is wall time of one
``retriever(question, 20)`` call (dense: query embedding + chromadb query; hybrid: both sides + RRF). Torch
runs on one thread by default (``--threads``): on a shared machine of few cores, intra-op threads that wait for
cores other processes hold make a single query embedding many times slower.

    python benchmarks/retrieval.py --dataset hotpotqa [--corpus all] [--eval-file FILE] [--limit N] [--json FILE]
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ragscale.experiments.files import write_json

KS = (2, 5, 10, 20)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


class TimedEmbedder:
    """Wraps the embedder to add up the time spent embedding during an index build."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name = inner.name
        self.seconds = 0.0
        self.count = 0

    def embed(self, texts):
        started = time.perf_counter()
        vectors = self.inner.embed(texts)
        self.seconds += time.perf_counter() - started
        self.count += len(texts)
        return vectors


def evaluate(retriever, examples) -> dict:
    recalls = {k: [] for k in KS}
    latencies = []
    for example in examples:
        started = time.perf_counter()
        passages = retriever(example.question, max(KS))
        latencies.append((time.perf_counter() - started) * 1000)
        gold = set(example.supporting_titles)
        for k in KS:
            found = {p.title for p in passages[:k]}
            recalls[k].append(len(gold & found) / len(gold))
    result = {f"recall@{k}": statistics.fmean(values) for k, values in recalls.items()}
    result["query_p50_ms"] = percentile(latencies, 50)
    result["query_p95_ms"] = percentile(latencies, 95)
    return result


def main(argv: list[str] | None = None) -> dict:
    from ragscale.process import prepare_process

    prepare_process(logging.WARNING)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from ragscale.data import DATASETS, default_data_dir, load_jsonl, load_split
    from ragscale.data.corpora import load_corpus
    from ragscale.programs.retrieval import BM25Retriever, DenseRetriever, HybridRetriever, MiniLMEmbedder

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="hotpotqa", choices=DATASETS)
    parser.add_argument("--split", default="dev")
    parser.add_argument("--eval-file", type=Path, help="JSONL in the shared schema instead of the bundled split")
    parser.add_argument("--limit", type=int, help="evaluate only the first N questions")
    parser.add_argument("--corpus", help="a dataset, all, questions or a JSONL file (default: --dataset's)")
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    parser.add_argument("--embed-sample", type=int, default=500, help="passages for the raw embedder timing")
    parser.add_argument("--weights", type=float, nargs=2, metavar=("DENSE", "BM25"), help="RRF weights")
    parser.add_argument("--depth-factor", type=int, default=3, help="hybrid candidates per side = max(f*k, 20)")
    parser.add_argument("--index-dir", type=Path, help="reuse indexes here (default: a fresh temp folder)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (0 = torch's default)")
    args = parser.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    examples = load_jsonl(args.eval_file) if args.eval_file else load_split(args.dataset, args.split)
    examples = [e for e in examples if e.supporting_titles][: args.limit]
    if not examples:
        parser.error(f"no questions with supporting titles in {args.eval_file or args.dataset}")
    chosen = load_corpus(args.corpus or args.dataset, default_data_dir(), questions=examples)
    corpus = chosen.with_paragraphs(examples).passages if args.eval_file else chosen.passages
    name = args.eval_file.stem if args.eval_file else args.dataset

    with tempfile.TemporaryDirectory(prefix="ragscale-bench-") as scratch:
        index_dir = args.index_dir or Path(scratch)
        embedder = MiniLMEmbedder()
        embedder.embed(["warm-up: load the model before timing"])

        # The raw embedder is timed interleaved with the index build (a slice of a seeded sample after each
        # indexing batch, excluded from the build time) so both see the same load on a shared machine.
        sample = random.Random(0).sample(corpus, min(args.embed_sample, len(corpus)))
        sample_texts = [f"{p['title']}: {p['text']}" for p in sample]
        timed = TimedEmbedder(embedder)
        dense = DenseRetriever(corpus, index_dir=index_dir, embedder=timed, build=False)
        steps = max(1, math.ceil(len(dense.missing_ids()) / dense.batch_size))
        step = math.ceil(len(sample_texts) / steps)
        raw = {"passages": 0, "seconds": 0.0}

        def interleave(done: int, total: int) -> None:
            chunk = sample_texts[raw["passages"] : raw["passages"] + step]
            if chunk:
                started = time.perf_counter()
                embedder.embed(chunk)
                raw["seconds"] += time.perf_counter() - started
                raw["passages"] += len(chunk)

        started = time.perf_counter()
        dense.build(progress=interleave)
        build_s = time.perf_counter() - started - raw["seconds"]
        dense.embedder = embedder  # queries are timed by evaluate()
        if raw["passages"] < len(sample_texts):  # nothing (or little) to index: time the rest on its own
            started = time.perf_counter()
            embedder.embed(sample_texts[raw["passages"] :])
            raw["seconds"] += time.perf_counter() - started
            raw["passages"] = len(sample_texts)
        embedder_rate = raw["passages"] / raw["seconds"]

        started = time.perf_counter()
        BM25Retriever(corpus, index_dir=index_dir)
        bm25_build_s = time.perf_counter() - started
        started = time.perf_counter()
        bm25 = BM25Retriever(corpus, index_dir=index_dir)
        bm25_load_s = time.perf_counter() - started

        hybrid = HybridRetriever(dense, bm25, weights=args.weights, depth_factor=args.depth_factor)
        results: dict = {"dataset": name, "corpus": chosen.name, "n_questions": len(examples)}
        results["n_passages"] = len(corpus)
        for label, retriever in (("dense", dense), ("bm25", bm25), ("hybrid", hybrid)):
            results[label] = evaluate(retriever, examples)
        indexed = timed.count or len(corpus)
        results.update(
            {
                "index_passages_per_s": indexed / build_s,
                "embedder_passages_per_s": embedder_rate,
                "index_build_s": build_s,
                "index_embed_s": timed.seconds,
                "embedder_sample_passages": raw["passages"],
                "index_embed_share": timed.seconds / build_s if build_s else None,
                "index_passages_embedded": timed.count,
                "bm25_build_s": bm25_build_s,
                "bm25_load_s": bm25_load_s,
                "hybrid_weights": list(args.weights) if args.weights else [1.0, 1.0],
                "hybrid_depth_factor": args.depth_factor,
                "torch_threads": args.threads,
            }
        )

    print(render(results))
    if args.json:
        write_json(args.json, results, indent=2)
    return results


def render(results: dict) -> str:
    lines = [
        f"{results['dataset']}: {results['n_questions']} questions, corpus {results.get('corpus')} of "
        f"{results['n_passages']} passages",
        "",
        "| retriever | recall@2 | recall@5 | recall@10 | recall@20 | query p50 ms | query p95 ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label in ("dense", "bm25", "hybrid"):
        row = results[label]
        recalls = " | ".join(f"{row[f'recall@{k}']:.3f}" for k in KS)
        lines.append(f"| {label} | {recalls} | {row['query_p50_ms']:.1f} | {row['query_p95_ms']:.1f} |")
    share = results["index_passages_per_s"] / results["embedder_passages_per_s"]
    in_build = results["index_embed_s"] / results["index_build_s"] if results["index_build_s"] else float("nan")
    lines += [
        "",
        f"dense index: {results['index_build_s']:.1f} s for {results['index_passages_embedded']} passages "
        f"({results['index_passages_per_s']:.1f} passages/s), raw embedder {results['embedder_passages_per_s']:.1f} "
        f"passages/s on a sample (index/raw = {share:.0%}); embedding took {in_build:.1%} of the build "
        f"({results['index_embed_s']:.1f} s), i.e. indexing ran at {in_build:.1%} of the embedder's own speed",
        f"BM25: build {results['bm25_build_s']:.2f} s, load from JSON {results['bm25_load_s']:.2f} s",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main(sys.argv[1:])
