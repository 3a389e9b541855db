"""Retrieval at scale: BM25, dense and hybrid over corpora of 10k, 100k and 1M passages.

The corpus of each size is a JSONL file (ragscale's ``{"id", "title", "text"}``, read back through ``--corpus``'s
own reader) holding the real passages pooled from every dataset (``--corpus all``, about 22.5k), and past that,
distractors made from them: distractor ``j`` takes the title of a random real passage with `` (variant j)`` after
it, and a text of sentences drawn from three random real passages (the first's opening sentence, then sentences of
the second and third) cut to the first's length, so the distractors have the real passages' words, lengths and
topics and compete with them for every query. At 10k the corpus is the evaluated questions' gold passages plus
random real passages.

Questions: the first ``--questions`` dev questions of HotpotQA, MuSiQue and 2WikiMultihopQA each; recall@k is the
share of a question's gold titles among the titles of the top k (a distractor's title never equals a real one).

Dense vectors: the real passages are embedded for real (once, cached under ``--work``; the embedder's passages/s is
reported); a distractor's vector is the normalised sum of its three sources' vectors plus Gaussian noise (sigma
``NOISE`` per dimension), normalised again, since embedding a million passages is not affordable on this CPU. They
enter chromadb through ``DenseRetriever``'s own build (``batch_size`` 5000). The dense index's recall@10 against
exact search is the overlap of its top 10 ids with numpy's exact cosine top 10 over the same vectors.

Each (size, part) runs in a child process, so its peak RSS is its own: ``bm25`` (build, reload, queries), ``dense``
(build from the cached vectors, queries, exact-search agreement) and ``hybrid`` (both indexes reloaded, queries).
Query latency is one ``retriever(question, k)`` call's wall time at k = 5, 50 and 200 (dense and hybrid include
embedding the query). Results go to ``--json`` after every part; a rerun skips the parts it holds, and ``--redo``
measures parts again on the indexes they built (their queries, not their build, which keeps its figures).
``--chroma-url`` runs the dense and hybrid parts through a chroma server (``chroma run``) instead of the embedded
store, the same ``DenseRetriever`` code, and keeps them apart in the JSON (``chroma_server``).

    python benchmarks/retrieval_scale.py --sizes 10k,100k,1m --json benchmarks/results/retrieval-scale.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

KS = (5, 50, 200)
NOISE = 0.02
DATASETS = ("hotpotqa", "musique", "2wikimultihopqa")
PARTS = ("bm25", "dense", "hybrid")


def parse_size(text: str) -> int:
    text = text.strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("km")) * scale)


def questions(data_dir: Path | None, per_dataset: int) -> list[dict]:
    from ragscale.data import default_data_dir, read_jsonl

    root = Path(data_dir or default_data_dir())
    picked = []
    for name in DATASETS:
        rows = [r for r in read_jsonl(root / name / "dev.jsonl") if r["supporting_titles"]][:per_dataset]
        picked += [
            {"dataset": name, "question": r["question"], "gold": sorted(set(r["supporting_titles"]))} for r in rows
        ]
    return picked


def make_corpus(path: Path, size: int, data_dir: Path | None, asked: list[dict]) -> None:
    """Write the corpus of ``size`` passages (see the module docstring) to ``path``, deterministically."""
    from ragscale.data import default_data_dir
    from ragscale.data.corpora import load_corpus

    real = load_corpus("all", Path(data_dir or default_data_dir())).passages
    rng = random.Random(size)
    if size <= len(real):
        gold = {title for q in asked for title in q["gold"]}
        chosen = [p for p in real if p["title"] in gold]
        rest = [p for p in real if p["title"] not in gold]
        chosen += rng.sample(rest, max(0, size - len(chosen)))
        rows = chosen[:size] if len(chosen) >= size else chosen
        rows = [{"id": p["id"], "title": p["title"], "text": p["text"]} for p in rows]
    else:
        rows = [{"id": p["id"], "title": p["title"], "text": p["text"]} for p in real]
        sentences = [re.split(r"(?<=\.) ", p["text"]) for p in real]
        for j in range(size - len(real)):
            a, b, c = (rng.randrange(len(real)) for _ in range(3))
            picked = [sentences[a][0], *rng.sample(sentences[b], min(2, len(sentences[b]))), *sentences[c][-2:]]
            text = " ".join(picked)[: max(200, len(real[a]["text"]))]
            rows.append({"id": f"syn{j}-{a}-{b}-{c}", "title": f"{real[a]['title']} (variant {j})", "text": text})
    partial = path.with_suffix(".partial")
    with partial.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    partial.replace(path)


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def peak_rss_gb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def measure(retriever, asked: list[dict]) -> dict:
    """Recall@k and query latency (p50/p95 ms) at each k in ``KS``."""
    out: dict = {}
    for k in KS:
        latencies, recalls = [], []
        for q in asked:
            started = time.perf_counter()
            passages = retriever(q["question"], k)
            latencies.append((time.perf_counter() - started) * 1000)
            found = {p.title for p in passages}
            recalls.append(len(found & set(q["gold"])) / len(q["gold"]))
        latencies.sort()
        out[f"k{k}"] = {
            "recall": round(statistics.fmean(recalls), 4),
            "p50_ms": round(latencies[len(latencies) // 2], 2),
            "p95_ms": round(latencies[min(len(latencies) - 1, round(0.95 * (len(latencies) - 1)))], 2),
        }
    return out


class Vectors:
    """Precomputed passage vectors for ``DenseRetriever``'s build (by passage text) and the real embedder for
    queries: the product's build path without embedding a million synthetic passages."""

    def __init__(self, embedder, by_text: dict) -> None:
        self.inner, self.by_text, self.name = embedder, by_text, embedder.name

    def embed(self, texts):
        import numpy as np

        if all(t in self.by_text for t in texts):
            return np.stack([self.by_text[t] for t in texts])
        return self.inner.embed(texts)


def real_vectors(work: Path, data_dir: Path | None, embedder) -> tuple[list[str], dict, dict]:
    """The ids of the real passages (``--corpus all``, in order), their vectors by id, embedded once for every size
    and cached (``real-vectors.npy``, ``real-ids.json``), and the embedder's timing."""
    import numpy as np

    from ragscale.data import default_data_dir
    from ragscale.data.corpora import load_corpus

    vec_path, ids_path, timing_path = work / "real-vectors.npy", work / "real-ids.json", work / "embed-timing.json"
    if vec_path.exists() and ids_path.exists() and timing_path.exists():
        ids = json.loads(ids_path.read_text())
        return (
            ids,
            dict(zip(ids, np.load(vec_path, allow_pickle=False), strict=True)),
            json.loads(timing_path.read_text()),
        )
    real = load_corpus("all", Path(data_dir or default_data_dir())).passages
    started = time.perf_counter()
    vectors = embedder.embed([format_passage_of(p) for p in real])
    seconds = time.perf_counter() - started
    timing = {"passages": len(real), "seconds": round(seconds, 1), "passages_per_s": round(len(real) / seconds, 1)}
    ids = [p["id"] for p in real]
    np.save(vec_path, vectors, allow_pickle=False)
    ids_path.write_text(json.dumps(ids))
    timing_path.write_text(json.dumps(timing))
    return ids, dict(zip(ids, vectors, strict=True)), timing


def distractor_vector(pid: str, have: dict, real_ids: list[str], rng):
    import numpy as np

    _, a, b, c = pid.split("-")  # syn<j>-<a>-<b>-<c>: the indices of its three sources
    vector = sum(have[real_ids[int(i)]] for i in (a, b, c)) + rng.normal(0, NOISE, 384).astype(np.float32)
    return (vector / np.linalg.norm(vector)).astype(np.float32)


def run_part(
    size: int, part: str, root: Path, data_dir: Path | None, asked: list[dict], chroma_url: str | None = None
) -> dict:
    """One (size, part) in this process; see the module docstring."""
    import shutil

    import numpy as np

    from ragscale.data.corpora import read_corpus_file
    from ragscale.programs.retrieval import BM25Retriever, DenseRetriever, HybridRetriever, MiniLMEmbedder

    work = root / str(size)
    started = time.perf_counter()
    corpus = read_corpus_file(work / f"corpus-{size}.jsonl")
    result: dict = {"passages": len(corpus), "read_s": round(time.perf_counter() - started, 1)}
    indexes = work / "indexes"
    if part == "bm25":
        shutil.rmtree(indexes / "bm25", ignore_errors=True)
        started = time.perf_counter()
        BM25Retriever(corpus.passages, index_dir=indexes, key=corpus.key)
        build_s = time.perf_counter() - started
        started = time.perf_counter()
        bm25 = BM25Retriever(corpus.passages, index_dir=indexes, key=corpus.key)
        result.update(
            build_s=round(build_s, 1), passages_per_s=round(len(corpus) / build_s),
            load_s=round(time.perf_counter() - started, 1), disk_mb=round(folder_bytes(indexes / "bm25") / 1e6, 1),
            queries=measure(bm25, asked),
        )  # fmt: skip
    elif part == "dense":
        embedder = MiniLMEmbedder()
        real_ids, have, timing = real_vectors(root, data_dir, embedder)
        rng = np.random.default_rng(size)
        by_text, matrix, order = {}, np.empty((len(corpus), 384), dtype=np.float32), []  # order: ids by row
        for row, p in enumerate(corpus.passages):
            vector = have[p["id"]] if p["id"] in have else distractor_vector(p["id"], have, real_ids, rng)
            matrix[row] = vector
            by_text[format_passage_of(p)] = vector
            order.append(p["id"])
        started = time.perf_counter()
        dense = DenseRetriever(corpus.passages, index_dir=indexes, embedder=Vectors(embedder, by_text),
                               key=corpus.key, batch_size=5000, build=False, chroma_url=chroma_url)  # fmt: skip
        added = dense.build()
        build_s = time.perf_counter() - started
        by_text.clear()
        dense.embedder = embedder
        agreement = []
        for q in asked:
            query = embedder.embed([q["question"]])[0]
            exact = np.argpartition(-(matrix @ query), 10)[:10]
            agreement.append(len({order[i] for i in exact} & {p.id for p in dense(q["question"], 10)}) / 10)
        result.update(
            build_s=round(build_s, 1) if added else None,
            vectors_added_per_s=round(added / build_s) if added == len(corpus) else None,
            disk_mb=None if chroma_url else round(folder_bytes(indexes / "chroma") / 1e6, 1), embedder=timing,
            vectors="real" if size <= len(real_ids) else f"{len(real_ids)} real, the rest synthetic",
            recall10_vs_exact=round(statistics.fmean(agreement), 4), queries=measure(dense, asked),
        )  # fmt: skip
    else:
        started = time.perf_counter()
        bm25 = BM25Retriever(corpus.passages, index_dir=indexes, key=corpus.key)
        dense = DenseRetriever(corpus.passages, index_dir=indexes, key=corpus.key, build=False, chroma_url=chroma_url)
        if dense.missing_ids():
            raise SystemExit(f"the dense index of {size} passages is not built: run the dense part first")
        result.update(
            load_s=round(time.perf_counter() - started, 1), queries=measure(HybridRetriever(dense, bm25), asked)
        )
    result["peak_rss_gb"] = round(peak_rss_gb(), 2)
    return result


def format_passage_of(p: dict) -> str:
    from ragscale.programs.retrieval import Passage, format_passage

    return format_passage(Passage(id=p["id"], title=p["title"], text=p["text"]))


def render(results: dict) -> str:
    lines = [
        f"{results['machine']}; {results['questions']} questions (HotpotQA, MuSiQue, 2Wiki dev)",
        "",
        "| passages | retriever | build s | passages/s | load s | peak RSS GB | disk MB | "
        + " | ".join(f"R@{k} | p50 ms k={k} | p95 ms k={k}" for k in KS)
        + " |",
        "|" + "---|" * (7 + 3 * len(KS)),
    ]
    tables = (("sizes", ""), ("chroma_server", " (chroma server)"))
    rows = [(size, part + note, row) for name, note in tables for size, parts in results.get(name, {}).items()
            for part, row in parts.items()]  # fmt: skip
    for size, part, row in sorted(rows, key=lambda r: (int(r[0]), PARTS.index(r[1].split()[0]), r[1])):
        rate = row.get("passages_per_s") or row.get("vectors_added_per_s") or ""
        cells = [f"{int(size):,}", part, row.get("build_s", ""), rate, row.get("load_s", ""), row["peak_rss_gb"],
                 row.get("disk_mb", "")]  # fmt: skip
        for k in KS:
            q = row["queries"][f"k{k}"]
            cells += [f"{q['recall']:.3f}", q["p50_ms"], q["p95_ms"]]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    for size, part, dense in sorted(rows, key=lambda r: (int(r[0]), r[1])):
        if part.startswith("dense"):
            lines.append(
                f"\n{int(size):,} passages, {part}: recall@10 against exact search {dense['recall10_vs_exact']:.3f}; "
                f"vectors: {dense['vectors']}; embedder {dense['embedder'].get('passages_per_s')} passages/s"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    from ragscale.process import prepare_process

    prepare_process(logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10k,100k,1m")
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--questions", type=int, default=100, help="dev questions per dataset")
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--work", type=Path, default=Path("runs/retrieval-scale"), help="corpora and indexes")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/retrieval-scale.json"))
    parser.add_argument(
        "--redo", default="", help="parts to measure again on their built indexes, keeping the build's own figures"
    )
    parser.add_argument(
        "--chroma-url", help="dense and hybrid parts through this chroma server (results under 'chroma_server')"
    )
    parser.add_argument("--one", nargs=2, metavar=("SIZE", "PART"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    asked = questions(args.data_dir, args.questions)
    if args.one:
        size, part = int(args.one[0]), args.one[1]
        print(json.dumps(run_part(size, part, args.work, args.data_dir, asked, args.chroma_url)))
        return

    from ragscale.experiments.files import write_json
    from ragscale.programs.lm.layouts import cpu_flags, cpu_model

    flags = " ".join(f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile") if f in cpu_flags())
    results = json.loads(args.json.read_text()) if args.json.exists() else {"sizes": {}}
    results.update(machine=f"{cpu_model()} ({flags}), {os.cpu_count()} cores", questions=len(asked))
    for size in (parse_size(s) for s in args.sizes.split(",")):
        folder = args.work / str(size)
        folder.mkdir(parents=True, exist_ok=True)
        corpus_path = folder / f"corpus-{size}.jsonl"
        if not corpus_path.exists():
            started = time.perf_counter()
            make_corpus(corpus_path, size, args.data_dir, asked)
            print(f"corpus of {size:,} passages written in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        table = results.setdefault("chroma_server", {}) if args.chroma_url else results["sizes"]
        done = table.setdefault(str(size), {})
        for part in args.parts.split(","):
            if part in done and part not in args.redo.split(","):
                continue
            earlier = done.get(part, {})
            load = os.getloadavg()[0]
            command = [sys.executable, __file__, "--one", str(size), part, "--questions", str(args.questions),
                       "--work", str(args.work)]  # fmt: skip
            if args.data_dir:
                command += ["--data-dir", str(args.data_dir)]
            if args.chroma_url:
                command += ["--chroma-url", args.chroma_url]
            started = time.perf_counter()
            out = subprocess.run(command, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                raise SystemExit(f"{size} {part} failed:\n{out.stderr[-3000:]}")
            fresh = json.loads(out.stdout.strip().splitlines()[-1])
            done[part] = {**earlier, **{key: value for key, value in fresh.items() if value is not None}}
            done[part]["peak_rss_gb"] = max(earlier.get("peak_rss_gb", 0), fresh["peak_rss_gb"])  # the build's too
            done[part].update(wall_s=round(time.perf_counter() - started, 1), load_before=round(load, 2),
                              load_after=round(os.getloadavg()[0], 2))  # fmt: skip
            write_json(args.json, results, indent=2)
            print(f"{size:,} {part}: done in {done[part]['wall_s']:.0f} s", file=sys.stderr)
    print(render(results))


if __name__ == "__main__":
    main()
