"""``ragscale ingest``: files into a document collection; ``ragscale ask``: a question answered over one."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import dspy

from ragscale.data.documents import VLMDescriber
from ragscale.experiments.cli.flags import add_flag, flags
from ragscale.experiments.collection import Collection, ask, ingest
from ragscale.experiments.config import ConfigError, with_default
from ragscale.experiments.files import write_json
from ragscale.experiments.inputs import check_lm, check_output_file, check_writable_dir
from ragscale.experiments.parts import load_named_lm
from ragscale.programs.lm import make_adapter
from ragscale.programs.retrieval.rerank import ORDERS


def add_ingest(subparsers) -> None:
    ingest_cmd = subparsers.add_parser(
        "ingest",
        help="chunk PDF/.txt/.md/.html files (text, tables as markdown, pictures as text) into a collection",
        description="Unchanged files are skipped; changed ones are replaced; unreadable ones are reported and "
        "the others still ingested (exit code 1 if any failed).",
    )
    ingest_cmd.add_argument(
        "paths", nargs="+", type=Path, metavar="PATH", help="files, or folders (their supported files, recursively)"
    )
    ingest_cmd.add_argument("--collection", required=True, help="collection name (runs/collections/NAME)")
    ingest_cmd.add_argument("--contextual", action="store_true", help="prepend an LM-written context to each chunk")
    known = flags()
    add_flag(ingest_cmd, "--lm", known=known, defaults=True, help=with_default("LM for --contextual", "lm"))
    add_flag(ingest_cmd, "--api-base", known=known, help="URL of an OpenAI-compatible server for --lm")
    add_flag(ingest_cmd, "--adapter", known=known, defaults=True)
    ingest_cmd.add_argument(
        "--max-tokens", dest="max_tokens", type=int, default=None, help="words per chunk (default: 150)"
    )
    ingest_cmd.add_argument(
        "--document-chars",
        dest="document_chars",
        type=int,
        default=6000,
        help="characters of the document the LM sees around each chunk (default: 6000)",
    )
    ingest_cmd.add_argument("--threads", type=int, default=4, help="context LM calls in flight (default: 4)")
    ingest_cmd.add_argument("--vlm-url", dest="vlm_url", help="OpenAI-compatible server of a vision-language model")
    ingest_cmd.add_argument("--vlm-model", dest="vlm_model", help="the VLM's model name on that server")
    ingest_cmd.add_argument("--no-ocr", dest="ocr", action="store_false", help="no OCR of pictures (caption only)")
    add_flag(ingest_cmd, "--request-timeout", known=known, defaults=True)
    add_flag(ingest_cmd, "--runs-dir", known=known, defaults=True)
    ingest_cmd.set_defaults(func=cmd_ingest)


def cmd_ingest(args: argparse.Namespace) -> int:
    if bool(args.vlm_url) != bool(args.vlm_model):
        raise ConfigError("--vlm-url and --vlm-model go together")
    if args.max_tokens is not None and args.max_tokens < 1:
        raise ConfigError(f"--max-tokens must be >= 1 word, got {args.max_tokens}")
    if args.threads < 1:
        raise ConfigError(f"--threads must be >= 1, got {args.threads}")
    if args.contextual:
        check_lm(args.lm)
    check_writable_dir(args.runs_dir, "--runs-dir")
    describer = VLMDescriber(args.vlm_url, args.vlm_model, timeout_s=args.request_timeout) if args.vlm_url else None
    common = {
        "collection": args.collection,
        "runs_dir": args.runs_dir,
        "max_tokens": args.max_tokens,
        "describer": describer,
        "ocr": args.ocr,
        "max_document_chars": args.document_chars,
        "threads": args.threads,
    }
    if args.contextual:
        lm = load_named_lm(args.lm, api_base=args.api_base, request_timeout=args.request_timeout)
        with dspy.context(lm=lm, adapter=make_adapter(args.adapter)):
            report = ingest(args.paths, contextual=True, model=args.lm, **common)
    else:
        report = ingest(args.paths, **common)
    for kind in ("added", "replaced", "unchanged"):
        for path in getattr(report, kind):
            print(f"{kind}: {path}")
    for error in report.failed.values():
        print(f"failed: {error}", file=sys.stderr)
    contexts = (
        f"; contexts: {report.contexts_written} written, {report.contexts_cached} cached" if args.contextual else ""
    )
    vectors = f"; vectors: {report.embedded} embedded, {report.reused} reused" if report.changed else ""
    print(f"collection {args.collection}: {report.chunks} chunks{contexts}{vectors}")
    return 1 if report.failed else 0


def add_ask(subparsers) -> None:
    ask_cmd = subparsers.add_parser("ask", help="answer a question over an ingested collection, with its sources")
    ask_cmd.add_argument("question")
    ask_cmd.add_argument("--collection", required=True)
    known = flags()
    add_flag(ask_cmd, "--method", known=known, default="rag", help="RAG method (default: rag)")
    add_flag(ask_cmd, "--lm", known=known, defaults=True)
    add_flag(ask_cmd, "--api-base", known=known, help="URL of an OpenAI-compatible server for --lm")
    for name in ("--adapter", "--docs", "--iterations"):
        add_flag(ask_cmd, name, known=known, defaults=True)
    ask_cmd.add_argument(
        "--rerank", type=int, default=0, metavar="DEPTH", help="grade DEPTH hybrid candidates with the LM first"
    )
    ask_cmd.add_argument(
        "--rerank-order",
        dest="rerank_order",
        choices=ORDERS,
        default="fused",
        help="fuse the grade order with the hybrid order by RRF (fused, the default) or keep the best graded (grade)",
    )
    add_flag(ask_cmd, "--request-timeout", known=known, defaults=True)
    add_flag(ask_cmd, "--runs-dir", known=known, defaults=True)
    ask_cmd.add_argument("--json", dest="json_path", type=Path, help="also write the answer and sources as JSON")
    ask_cmd.set_defaults(func=cmd_ask)


def cmd_ask(args: argparse.Namespace) -> int:
    if not Collection(args.collection, args.runs_dir).exists:
        raise ConfigError(f"no collection {args.collection!r} under {args.runs_dir / 'collections'}")
    for flag, value, low in (
        ("--docs", args.docs, 1),
        ("--iterations", args.iterations, 1),
        ("--rerank", args.rerank, 0),
    ):
        if value < low:
            raise ConfigError(f"{flag} must be >= {low}, got {value}")
    if not args.question.strip():
        raise ConfigError("the question is empty")
    check_lm(args.lm)
    if args.json_path is not None:
        check_output_file(args.json_path, "--json")
    lm = load_named_lm(args.lm, api_base=args.api_base, request_timeout=args.request_timeout)
    with dspy.context(lm=lm, adapter=make_adapter(args.adapter)):
        result = ask(
            args.question,
            collection=args.collection,
            runs_dir=args.runs_dir,
            method=args.method,
            docs=args.docs,
            iterations=args.iterations,
            rerank_depth=args.rerank,
            rerank_order=args.rerank_order,
        )
    print(f"answer: {result['answer']}")
    print("sources:")
    names = {}
    for chunk in Collection(args.collection, args.runs_dir).chunks:
        names.setdefault(chunk["document"], set()).add(chunk.get("source", ""))
    if not result["sources"]:
        print(f"  (none: {args.method} answered without passages)")
    for number, source in enumerate(result["sources"], start=1):
        where = f" ({source['source']})" if len(names.get(source["document"], ())) > 1 else ""
        print(f"  [{number}] {source['document']}{where}, page {source['page']}, {source['kind']}")
    if args.json_path is not None:
        write_json(args.json_path, result, indent=2)
    return 0


def add_parsers(subparsers) -> None:
    add_ingest(subparsers)
    add_ask(subparsers)
