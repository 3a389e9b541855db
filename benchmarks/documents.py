"""Grounded answers over ../shared/documents: plain vs contextual chunks, each without and with LM reranking.

The four PDFs are chunked at `--max-tokens` words (50 by default: ~80 chunks instead of ~40 at the ingest default
of 150, so a page holds several chunks and the first-ranked one can miss). For every configuration, over the
questions of `benchmarks/documents_questions.jsonl` (answers in text, tables and charts, each with its document
and pages), it measures:

- R@1 / R@5: the share of questions whose answer page (document + page) is the first / among the `k` passages kept;
- Ans@5: the share whose answer string (a gold alias, normalised) is inside one of the kept passages;
- Acc / EM: answer accuracy (a gold alias contained in the prediction) and exact match, with RAG (one
  `Predict(Answer)` over the `k` passages, most relevant last) and the LM of `--lm`;
- LM calls and seconds per question. Without reranking the passages are the hybrid (BM25 + dense, RRF) top `k`;
  with it, the LM grades the hybrid top `--depth` (`Reranker`, one `Grade` call per candidate) and keeps `k`:
  `+grade` the `k` best graded (expected grade, ties in hybrid order; `order="grade"`), `+fused` the `k` best by
  RRF of the grade order and the hybrid order (`order="fused"`). The grades given are counted. The grader is
  compiled first, as `ragscale run` compiles CRAG's and Self-RAG's (`compile_graders` with `--grader`, `labeled` by
  default, on the first `--grader-train-limit` HotpotQA train questions' supporting and other paragraphs);
  `--grader none` grades with the uncompiled predictor.

Contextual chunks are written by the same LM at ingestion; the cost of writing them is printed once (contexts
are cached in the collection, so a rerun with the same `--runs-dir` costs no LM calls for them). Each answered
question is appended to `<runs-dir>/records/<config>-<settings hash>.jsonl` as it finishes, so an interrupted
run resumes where it stopped and its table still sums each question's own calls and seconds.

    DSPY_CACHEDIR=$(mktemp -d) python benchmarks/documents.py --publish documents-qwen2.5-coder-0.5b

With ``--publish NAME`` every answered question is committed to ``benchmarks/results/NAME/``
(``ragscale.published.documents``), from which the tables of ``docs/documents.md`` are made again.

Timings on a shared 2-core machine are noisy; the scores are deterministic (greedy decoding, constrained grades).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from ragscale.experiments.files import write_json

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = REPO.parent / "shared" / "documents"
QUESTIONS = Path(__file__).with_name("documents_questions.jsonl")
RESULTS = REPO / "benchmarks" / "results"
PDFS = (
    "financial_market_analysis_report_2023.pdf",
    "alien_plant_threat_assessment_p24-27.pdf",
    "simple_table.pdf",
    "simple_figure.pdf",
)
CONFIGS = ("plain", "plain+grade", "plain+fused", "contextual", "contextual+grade", "contextual+fused")  # +order


def _normalise(text: str) -> str:
    return " ".join("".join(ch.lower() if ch.isalnum() else " " for ch in text).split())


def answer_in(passages: list, answers: list[str]) -> bool:
    """Whether a gold alias appears, as whole words, in one of the passages."""
    texts = [f" {_normalise(p.text)} " for p in passages]
    return any(f" {_normalise(a)} " in text for a in answers if _normalise(a) for text in texts)


def answer_rank(passages: list, chunks: dict, question: dict) -> int | None:
    """1-based rank of the first passage on an answer page, or None."""
    for rank, passage in enumerate(passages, start=1):
        chunk = chunks[passage.id]
        if chunk["document"] == question["document"] and chunk["page"] in question["pages"]:
            return rank
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lm", default="qwen2.5-coder-0.5b")
    parser.add_argument("--api-base", dest="api_base")
    parser.add_argument("--adapter", default="field", choices=("field", "chat", "json"))
    parser.add_argument("--limit", type=int, default=None, help="first N questions (default: all)")
    parser.add_argument("--k", type=int, default=5, help="passages kept and given to the answer (default: 5)")
    parser.add_argument("--depth", type=int, default=20, help="hybrid candidates the LM grades (default: 20)")
    parser.add_argument("--max-tokens", dest="max_tokens", type=int, default=50, help="words per chunk (default: 50)")
    parser.add_argument("--document-chars", dest="document_chars", type=int, default=1200)
    parser.add_argument("--threads", type=int, default=8, help="LM calls in flight (the engine batches them)")
    parser.add_argument("--runs-dir", dest="runs_dir", type=Path, default=REPO / "runs" / "bench-documents")
    parser.add_argument("--documents", type=Path, default=DOCUMENTS)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--grader", default="labeled", help="teleprompter for the reranker's grader, or none")
    parser.add_argument("--grader-train-limit", dest="grader_train_limit", type=int, default=32)
    parser.add_argument("--json", dest="json_path", type=Path)
    parser.add_argument("--publish", metavar="NAME", help="commit every answer to benchmarks/results/NAME/")
    args = parser.parse_args(argv)

    from ragscale.process import prepare_process

    prepare_process(logging.WARNING)
    os.environ.setdefault("DSPY_CACHEDIR", tempfile.mkdtemp(prefix="ragscale-bench-dspy-"))

    import dspy
    from dspy.utils.exceptions import AdapterParseError

    from ragscale.data import load_split
    from ragscale.experiments.collection import Collection, ingest
    from ragscale.optimizers.graders import compile_graders
    from ragscale.optimizers.metrics import accuracy, exact_match
    from ragscale.optimizers.teleprompters import OPTIMIZERS
    from ragscale.programs.calibration import CalibratedPredict
    from ragscale.programs.lm import load_lm, make_adapter, meter
    from ragscale.programs.rag import RAG
    from ragscale.programs.retrieval.rerank import Reranker
    from ragscale.published import documents
    from ragscale.published.runs import made_here, publish_rows
    from ragscale.signatures import Grade

    questions = [json.loads(line) for line in QUESTIONS.read_text(encoding="utf-8").splitlines() if line.strip()]
    questions = questions[: args.limit] if args.limit else questions
    paths = [args.documents / name for name in PDFS]
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = sorted(set(configs) - set(CONFIGS))
    if unknown:
        parser.error(f"unknown configs {unknown}; valid: {', '.join(CONFIGS)}")
    if args.grader != "none" and args.grader not in OPTIMIZERS:
        parser.error(f"unknown --grader {args.grader!r}; valid: none, {', '.join(sorted(OPTIMIZERS))}")
    made_by = made_here()  # the code and machine of this run, whatever is committed while it runs
    lm = load_lm(args.lm, api_base=args.api_base, cache=False)
    adapter = make_adapter(args.adapter)
    settings = {
        "lm": args.lm,
        "adapter": args.adapter,
        "k": args.k,
        "depth": args.depth,
        "max_tokens": args.max_tokens,
        "document_chars": args.document_chars,
        "grader": args.grader,
        "grader_train_limit": args.grader_train_limit,
        "questions": hashlib.sha256(QUESTIONS.read_bytes()).hexdigest()[:12],
    }
    tag = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:10]
    records_dir = args.runs_dir / "records"
    records_dir.mkdir(parents=True, exist_ok=True)

    setup: dict[str, dict] = {}
    collections = {"plain": f"plain-{args.max_tokens}w", "contextual": f"contextual-{args.max_tokens}w"}
    start = time.perf_counter()
    report = ingest(paths, collection=collections["plain"], runs_dir=args.runs_dir, max_tokens=args.max_tokens)
    setup["plain"] = {"ingest_s": round(time.perf_counter() - start, 1), "chunks": report.chunks, "lm_calls": 0}
    if any(c.startswith("contextual") for c in configs):
        cost_file = records_dir / f"contextual-ingest-{tag}.json"
        start = time.perf_counter()
        with dspy.context(lm=lm, adapter=adapter), meter() as usage:
            report = ingest(
                paths,
                collection=collections["contextual"],
                runs_dir=args.runs_dir,
                contextual=True,
                model=args.lm,
                max_tokens=args.max_tokens,
                max_document_chars=args.document_chars,
                threads=args.threads,
            )
        setup["contextual"] = {
            "ingest_s": round(time.perf_counter() - start, 1),
            "chunks": report.chunks,
            "lm_calls": usage.calls,
            "contexts_written": report.contexts_written,
            "contexts_cached": report.contexts_cached,
        }
        paid = json.loads(cost_file.read_text(encoding="utf-8")) if cost_file.is_file() else {}
        if report.contexts_written:  # the paying ingestion (or the rest of an interrupted one): keep its cost
            paid = {key: paid.get(key, 0) + setup["contextual"][key] for key in ("lm_calls", "contexts_written")} | {
                "ingest_s": round(paid.get("ingest_s", 0) + setup["contextual"]["ingest_s"], 1)
            }
            cost_file.write_text(json.dumps(paid) + "\n", encoding="utf-8")
        setup["contextual"]["contexts_paid"] = paid
    print(f"setup: {json.dumps(setup)}", file=sys.stderr, flush=True)

    grader = {"optimizer": args.grader}
    if any("+" in c for c in configs):  # one compiled grader for every reranked configuration
        start = time.perf_counter()
        train = load_split("hotpotqa", "train")[: args.grader_train_limit]
        with dspy.context(lm=lm, adapter=adapter), meter() as usage:
            learned = compile_graders(
                CalibratedPredict(Grade), train, optimizer=args.grader, shots=4, lm=lm, adapter=adapter
            )
        grader |= {"demos": len(learned.demos), "lm_calls": usage.calls,
                   "compile_s": round(time.perf_counter() - start, 1)}  # fmt: skip
        print(f"grader: {json.dumps(grader)}", file=sys.stderr, flush=True)
    rows: dict[str, dict] = {}
    done: dict[str, list[dict]] = {}
    for config in configs:
        chunking, _, order = config.partition("+")
        store = Collection(collections[chunking], args.runs_dir)
        chunks = store.by_id()
        retriever = store.retriever()
        reranker = None
        if order:
            reranker = Reranker(retriever, depth=args.depth, threads=args.threads, order=order)
            reranker.grade.load_state(learned.dump_state())
        records_path = records_dir / f"{config}-{tag}.jsonl"
        records = {}
        if records_path.is_file():
            for line in records_path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    record = json.loads(line)
                    records[record["id"]] = record
        with dspy.context(lm=lm, adapter=adapter), records_path.open("a", encoding="utf-8") as sink:
            for q in questions:
                if q["id"] in records:
                    continue
                before = Counter(reranker.grade_counts) if reranker is not None else Counter()
                started = time.perf_counter()
                with meter() as usage:
                    passages = (reranker or retriever)(q["question"], args.k)
                    rag = RAG(retriever=lambda query, k, found=passages: found[:k], k=args.k)
                    try:
                        answer = str(rag(question=q["question"]).answer)
                    except AdapterParseError as error:
                        answer = ""
                        logging.warning("question %s: %s", q["id"], error)
                record = {
                    "id": q["id"],
                    "kind": q["kind"],
                    "answers": q["answers"],
                    "passages": [p.id for p in passages],
                    "rank": answer_rank(passages, chunks, q),
                    "answer_in_passages": answer_in(passages, q["answers"]),
                    "answer": answer,
                    "acc": accuracy(answer, q["answers"]),
                    "em": exact_match(answer, q["answers"]),
                    "lm_calls": usage.calls,
                    "seconds": round(time.perf_counter() - started, 2),
                    "grades": dict((reranker.grade_counts - before) if reranker is not None else {}),
                }
                records[q["id"]] = record
                sink.write(json.dumps(record) + "\n")
                sink.flush()
        done[config] = [records[q["id"]] for q in questions]
        found = documents.scores(done[config])
        print(f"{config}: " + ", ".join(f"{name} {value:.1f}" for name, value in found.items()), file=sys.stderr)
        rows[config] = {"params": {"config": config, "chunks": len(chunks)}, "metrics": found}

    n = len(questions)
    print(f"LM {args.lm}, {args.max_tokens}-word chunks, k={args.k}, rerank depth {args.depth}, {n} questions")
    print(documents.table(done, args.k))
    print(f"\neach against {configs[0]}, paired over the questions ({documents.RULE}):")
    print(documents.versus(done, args.k))
    for name, info in setup.items():
        print(f"ingest {name}: {json.dumps(info)}")
    print(f"grader: {json.dumps(grader)}")
    about = {"settings": settings, "setup": setup, "grader": grader}
    if args.json_path is not None:
        args.json_path.parent.mkdir(parents=True, exist_ok=True)
        write_json(args.json_path, {**about, "rows": rows, "records": done}, indent=2)
    if args.publish:
        command = "python benchmarks/documents.py " + " ".join(argv if argv is not None else sys.argv[1:])
        folder = publish_rows(RESULTS / args.publish, rows, done, documents.KEPT, command=command, made_by=made_by,
                              about=about)  # fmt: skip
        print(f"\npublished to {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
