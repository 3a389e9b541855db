"""Grounded answers over ../shared/documents: plain vs contextual chunks, each without and with LM reranking.

For every configuration it measures, over the questions of `benchmarks/documents_questions.jsonl` (answers in
text, tables and charts, each with its document and pages):

- recall@5: the share of questions whose answer page (document + page) is among the 5 passages kept;
- Acc / EM: answer accuracy (a gold alias contained in the prediction) and exact match, with RAG (one
  `Predict(Answer)` over the 5 passages, most relevant last) and the LM of `--lm`;
- LM calls and seconds per question (reranking grades `--rerank-depth` hybrid candidates per question).

Contextual chunks are written by the same LM at ingestion; their cost is printed once (contexts are cached in
the collection, so a rerun with the same `--runs-dir` costs no LM calls for them).

    python benchmarks/documents.py --limit 34 --json runs/bench/documents.json

Timings on a shared 2-core machine are noisy; the scores are deterministic (greedy decoding).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = REPO.parent / "shared" / "documents"
QUESTIONS = Path(__file__).with_name("documents_questions.jsonl")
PDFS = (
    "financial_market_analysis_report_2023.pdf",
    "alien_plant_threat_assessment_p24-27.pdf",
    "simple_table.pdf",
    "simple_figure.pdf",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lm", default="smollm2-135m")
    parser.add_argument("--api-base", dest="api_base")
    parser.add_argument("--adapter", default="field", choices=("field", "chat", "json"))
    parser.add_argument("--limit", type=int, default=None, help="first N questions (default: all)")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--rerank-depth", dest="rerank_depth", type=int, default=10)
    parser.add_argument("--document-chars", dest="document_chars", type=int, default=3000)
    parser.add_argument("--threads", type=int, default=4, help="LM calls in flight (the engine batches them)")
    parser.add_argument("--runs-dir", dest="runs_dir", type=Path, default=REPO / "runs" / "bench-documents")
    parser.add_argument("--documents", type=Path, default=DOCUMENTS)
    parser.add_argument("--configs", default="plain,plain+rerank,contextual,contextual+rerank")
    parser.add_argument("--json", dest="json_path", type=Path)
    args = parser.parse_args(argv)

    for key, value in {
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "MLFLOW_DISABLE_TELEMETRY": "true",
    }.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("DSPY_CACHEDIR", tempfile.mkdtemp(prefix="ragscale-bench-dspy-"))
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    import dspy
    from dspy.utils.exceptions import AdapterParseError

    from ragscale.optimizers.documents import Collection, ingest
    from ragscale.optimizers.metrics import accuracy, exact_match
    from ragscale.optimizers.runner import make_adapter
    from ragscale.programs.lm import load_lm, meter
    from ragscale.programs.rag import RAG
    from ragscale.programs.retrieval.rerank import Reranker

    questions = [json.loads(line) for line in QUESTIONS.read_text(encoding="utf-8").splitlines() if line.strip()]
    questions = questions[: args.limit] if args.limit else questions
    paths = [args.documents / name for name in PDFS]
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    lm = load_lm(args.lm, api_base=args.api_base, cache=False)
    adapter = make_adapter(args.adapter)

    setup: dict[str, dict] = {}
    start = time.perf_counter()
    ingest(paths, collection="plain", runs_dir=args.runs_dir)
    setup["plain"] = {"ingest_s": round(time.perf_counter() - start, 1), "lm_calls": 0}
    if any(c.startswith("contextual") for c in configs):
        start = time.perf_counter()
        with dspy.context(lm=lm, adapter=adapter), meter() as usage:
            report = ingest(
                paths,
                collection="contextual",
                runs_dir=args.runs_dir,
                contextual=True,
                model=args.lm,
                max_document_chars=args.document_chars,
                threads=args.threads,
            )
        setup["contextual"] = {
            "ingest_s": round(time.perf_counter() - start, 1),
            "lm_calls": usage.calls,
            "contexts_written": report.contexts_written,
            "contexts_cached": report.contexts_cached,
        }

    print(f"setup: {json.dumps(setup)}", file=sys.stderr, flush=True)
    rows = []
    for config in configs:
        store = Collection(config.split("+")[0], args.runs_dir)
        chunks = store.by_id()
        retriever = store.retriever()
        if config.endswith("+rerank"):
            retriever = Reranker(retriever, depth=args.rerank_depth, threads=args.threads)
        recall, acc, em, calls, records = 0.0, 0.0, 0.0, 0, []
        started = time.perf_counter()
        with dspy.context(lm=lm, adapter=adapter):
            for q in questions:
                with meter() as usage:
                    passages = retriever(q["question"], args.k)
                    rag = RAG(retriever=lambda query, k, found=passages: found[:k], k=args.k)
                    try:
                        answer = str(rag(question=q["question"]).answer)
                    except AdapterParseError as error:
                        answer = ""
                        logging.warning("question %s: %s", q["id"], error)
                pages = {(chunks[p.id]["document"], chunks[p.id]["page"]) for p in passages}
                hit = any((q["document"], page) in pages for page in q["pages"])
                recall += hit
                acc += accuracy(answer, q["answers"])
                em += exact_match(answer, q["answers"])
                calls += usage.calls
                records.append({"id": q["id"], "kind": q["kind"], "hit": hit, "answer": answer})
        n = len(questions)
        seconds = time.perf_counter() - started
        by_kind = {
            kind: round(
                100
                * sum(r["hit"] for r in records if r["kind"] == kind)
                / max(1, sum(r["kind"] == kind for r in records)),
                1,
            )
            for kind in ("text", "table", "picture")
        }
        rows.append(
            {
                "config": config,
                "n": n,
                "recall_at_5": round(100 * recall / n, 1),
                "recall_by_kind": by_kind,
                "acc": round(100 * acc / n, 1),
                "em": round(100 * em / n, 1),
                "lm_calls_per_q": round(calls / n, 2),
                "s_per_q": round(seconds / n, 2),
                "records": records,
            }
        )
        print(
            f"{config}: R@5 {rows[-1]['recall_at_5']} Acc {rows[-1]['acc']} EM {rows[-1]['em']} "
            f"({rows[-1]['lm_calls_per_q']} calls/q, {seconds:.0f} s)",
            file=sys.stderr,
            flush=True,
        )

    columns = ("config", "n", "R@5", "R@5 text", "table", "picture", "Acc", "EM", "calls/q", "s/q")
    widths = (20, 3, 6, 9, 6, 8, 6, 6, 8, 6)
    header = " ".join(
        f"{c:<{w}}" if i == 0 else f"{c:>{w}}" for i, (c, w) in enumerate(zip(columns, widths, strict=True))
    )
    print(f"LM {args.lm}, k={args.k}, rerank depth {args.rerank_depth}, {len(questions)} questions")
    print(header)
    print("-" * len(header))
    for row in rows:
        kinds = row["recall_by_kind"]
        values = (
            row["config"], row["n"], row["recall_at_5"], kinds["text"], kinds["table"], kinds["picture"],
            row["acc"], row["em"], row["lm_calls_per_q"], row["s_per_q"],
        )  # fmt: skip
        cells = [f"{values[0]:<{widths[0]}}", f"{values[1]:>{widths[1]}}"]
        cells += [f"{v:>{w}.1f}" for v, w in zip(values[2:8], widths[2:8], strict=True)]
        cells += [f"{v:>{w}.2f}" for v, w in zip(values[8:], widths[8:], strict=True)]
        print(" ".join(cells))
    for name, info in setup.items():
        print(f"ingest {name}: {json.dumps(info)}")
    if args.json_path is not None:
        args.json_path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"lm": args.lm, "k": args.k, "rerank_depth": args.rerank_depth, "setup": setup, "rows": rows}
        args.json_path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
