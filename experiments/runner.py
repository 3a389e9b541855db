"""The experiment runner: compile a method on a train split, evaluate it on another, track it all in MLflow.

`run_experiment(config)` does, in order: load the LM (an unknown name fails before anything expensive); load the
train and eval examples; build the corpus from the paragraphs of the questions of this run (the compile subset of
train plus the eval subset, a distractor-setting pool) and its retriever (index cached under
`<runs_dir>/indexes`); build the program; compile it on train with the configured teleprompter and save it as
JSON; evaluate it with `threads` workers, each question metered (LM calls, input and output tokens) and written to
`predictions.jsonl` as soon as it finishes; then log the summary, the predictions table, the compiled program and
the config to MLflow.

A question whose program raises is recorded with `error` ("Type: message") and scores 0 (EM, F1, Acc and, when
the question has supporting titles, retrieval recall): **failed questions count as 0 in the means**, so a method
that crashes is not rewarded by a smaller denominator. `n` counts every evaluated question, `failed` the crashed
ones.

Summary (`--json FILE` writes the same): method, dataset, optimizer, lm, n, failed, em, f1, acc,
retrieval_recall (all four in percent; recall is None for a program without a retriever or when no question has
supporting titles), lm_calls_per_question,
input_tokens_per_question (the mean effective context: all input tokens of all LM calls of a question),
output_tokens_per_question, questions_per_minute (evaluation only), compile_s (the teleprompter alone), wall_s
(the whole run: loading, indexing, compiling, evaluating), mlflow_run_id.
"""

from __future__ import annotations

import contextvars
import csv
import json
import logging
import random
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ragscale.experiments import tracking
from ragscale.experiments.config import ConfigError, RunConfig

log = logging.getLogger(__name__)

SUMMARY_KEYS = (
    "method", "dataset", "optimizer", "lm", "n", "failed", "em", "f1", "acc", "retrieval_recall",
    "lm_calls_per_question", "input_tokens_per_question", "output_tokens_per_question", "questions_per_minute",
    "compile_s", "wall_s", "mlflow_run_id",
)  # fmt: skip

PREDICTIONS = "predictions.jsonl"
PROGRAM = "program.json"


def make_adapter(name: str):
    """The DSPy adapter for `name` ("field": ours for small local models; "chat", "json": DSPy's)."""
    import dspy

    if name == "field":
        from ragscale.programs.lm.adapter import FieldAdapter

        return FieldAdapter()
    if name == "chat":
        # DSPy's silent retry through JSONAdapter doubles calls and hides parse failures: keep it off.
        return dspy.ChatAdapter(use_json_adapter_fallback=False)
    if name == "json":
        return dspy.JSONAdapter()
    raise ConfigError(f"unknown adapter {name!r}; valid choices: chat, field, json")


def load_named_lm(name: str, *, api_base: str | None = None, max_tokens: int = 256, cache: bool = True):
    """`load_lm(name)`; an unknown or unusable LM name becomes a ConfigError naming it."""
    from ragscale.programs.lm import load_lm

    try:
        return load_lm(name, api_base=api_base, max_tokens=max_tokens, cache=cache)
    except (ValueError, FileNotFoundError) as exc:
        raise ConfigError(f"--lm {name!r}: {exc}") from exc


def load_lm_for(config: RunConfig):
    """`load_named_lm` with the config's LM settings."""
    return load_named_lm(config.lm, api_base=config.api_base, max_tokens=config.max_tokens, cache=config.cache)


def load_examples(config: RunConfig) -> tuple[list, list]:
    """(train, eval) examples, cut to `train_limit` and `limit` (the files' order, which is already shuffled)."""
    from ragscale.data import load_jsonl, load_split

    train = load_split(config.dataset, "train", config.data_dir)
    if config.eval_file is not None:
        evalset = load_jsonl(config.eval_file)
    else:
        evalset = load_split(config.dataset, "dev", config.data_dir)
    if config.train_limit is not None:
        train = train[: config.train_limit]
    if config.limit is not None:
        evalset = evalset[: config.limit]
    return train, evalset


def build_program(config: RunConfig, retriever):
    from ragscale.programs import PROGRAMS

    cls = PROGRAMS[config.method]
    if config.method == "iterdrag":
        return cls(retriever=retriever, k=config.k, max_iterations=config.max_iterations)
    return cls(retriever=retriever, k=config.k)


def compile_for(config: RunConfig, program, trainset: Sequence, lm, adapter=None):
    """Compile `program` on `trainset` with the configured teleprompter (`none` returns it as it is); its Grade
    predictors (CRAG, Self-RAG) are then compiled on their own relevance labels (`compile_graders`)."""
    from ragscale.optimizers.graders import compile_graders
    from ragscale.optimizers.metrics import METRICS
    from ragscale.optimizers.teleprompters import compile_program

    compiled = compile_program(
        program,
        list(trainset),
        optimizer=config.optimizer,
        metric=METRICS[config.metric],
        max_demos=config.max_demos,
        max_docs_per_demo=config.max_docs_per_demo,
        lm=lm,
        adapter=adapter,
        seed=config.seed,
        threads=config.threads,
    )
    return compile_graders(
        compiled, list(trainset), optimizer=config.optimizer, max_demos=config.max_demos, lm=lm, adapter=adapter,
        seed=config.seed, threads=config.threads,
    )  # fmt: skip


def fits_context(program, lm, adapter, examples: Sequence, *, percentile: float = 95.0) -> dict[str, int]:
    """`check_fits_context` with the longest question of `examples` and, for every document slot, a paragraph of the
    `percentile`-th length of their paragraphs; raises `ContextWindowError` (a ValueError naming the predictor and
    the counts) when that prompt cannot fit.

    Not the longest paragraph: HotpotQA's is 16x its median (8,277 characters against 504), and k copies of it
    would reject configurations whose real prompts fit. The engine refuses a prompt over the window, so a rare
    question that still overflows is recorded as failed and the run goes on.
    """
    from ragscale.optimizers.teleprompters import check_fits_context
    from ragscale.programs.retrieval import Passage, format_passage

    question = max((ex.question for ex in examples), key=len, default="")
    documents = sorted(
        (
            format_passage(Passage(id="", title=p["title"], text=p["text"]))
            for ex in examples
            for p in (getattr(ex, "paragraphs", None) or [])
        ),
        key=len,
    )
    document = documents[round(percentile / 100 * (len(documents) - 1))] if documents else ""
    estimates = check_fits_context(program, lm, question=question, document=document, adapter=adapter)
    log.info("prompt estimates (tokens, documents at the p%g length): %s", percentile, estimates)
    return estimates


def _titles_and_ids(passages: Iterable[Any]) -> tuple[list[str], list[str]]:
    titles, ids = [], []
    for passage in passages or []:
        if isinstance(passage, Mapping):
            titles.append(str(passage.get("title", "")))
            ids.append(str(passage.get("id", "")))
        else:
            titles.append(str(getattr(passage, "title", "")))
            ids.append(str(getattr(passage, "id", "")))
    return titles, ids


def answer_one(program, example, *, retrieves: bool = True) -> dict[str, Any]:
    """Run the program on one question inside its own usage meter and score it; never raises an Exception.

    The record: id, question, prediction, answers, em, f1, acc, retrieval_recall (None when the question has no
    supporting titles or the program does not retrieve: `retrieves` False), lm_calls, input_tokens, output_tokens,
    latency_s, passage_ids, passage_titles, sub_questions and intermediate_answers (IterDRAG, else empty), error
    (None, or "Type: message").
    """
    import dspy

    from ragscale.optimizers.metrics import accuracy, exact_match, f1, retrieval_recall
    from ragscale.programs.lm import meter

    answers = list(example.answers)
    supporting = list(getattr(example, "supporting_titles", None) or []) if retrieves else []
    prediction, error, pred = "", None, None
    start = time.perf_counter()
    with meter() as usage:
        try:
            # A fresh trace per question: the default one is a list shared by every thread.
            with dspy.context(trace=[]):
                pred = program(question=example.question)
            prediction = str(pred.answer)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            log.warning("question %s failed: %s", example.id, error)
    latency = time.perf_counter() - start
    titles, ids = _titles_and_ids(getattr(pred, "passages", None) if pred is not None else None)
    ok = error is None
    return {
        "id": str(example.id),
        "question": example.question,
        "prediction": prediction,
        "answers": answers,
        "em": exact_match(prediction, answers) if ok else 0.0,
        "f1": f1(prediction, answers) if ok else 0.0,
        "acc": accuracy(prediction, answers) if ok else 0.0,
        "retrieval_recall": (retrieval_recall(titles, supporting) if ok else 0.0) if supporting else None,
        "lm_calls": usage.calls,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "latency_s": round(latency, 4),
        "passage_ids": ids,
        "passage_titles": titles,
        "sub_questions": list(getattr(pred, "sub_questions", None) or []) if pred is not None else [],
        "intermediate_answers": list(getattr(pred, "intermediate_answers", None) or []) if pred is not None else [],
        "error": error,
    }


def evaluate(
    program,
    examples: Sequence,
    *,
    threads: int,
    records_path: Path,
    progress: bool = True,
    on_record: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Answer `examples` with `threads` workers, appending each record to `records_path` as it finishes.

    Each worker runs in a copy of the caller's context, so `dspy.context(lm=..., adapter=...)` set around this
    call (a contextvar in DSPy 3.4) reaches the worker threads, and each question's `meter()` is its own.
    Records are flushed one by one: an interrupted run keeps everything that finished.
    """
    from tqdm.auto import tqdm

    records: list[dict] = []
    records_path.parent.mkdir(parents=True, exist_ok=True)
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="ragscale-eval")
    try:
        with (
            records_path.open("w", encoding="utf-8") as out,
            tqdm(total=len(examples), desc="evaluating", unit="q", disable=not progress) as bar,
        ):
            retrieves = getattr(program, "retriever", None) is not None  # closed-book has no recall to report
            futures = [
                pool.submit(contextvars.copy_context().run, answer_one, program, ex, retrieves=retrieves)
                for ex in examples
            ]
            for future in as_completed(futures):
                record = future.result()
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                out.flush()
                records.append(record)
                if on_record is not None:
                    on_record(record)
                bar.update(1)
                bar.set_postfix(
                    em=f"{100 * sum(r['em'] for r in records) / len(records):.1f}",
                    failed=sum(r["error"] is not None for r in records),
                )
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    order = {str(ex.id): i for i, ex in enumerate(examples)}
    records.sort(key=lambda r: order.get(r["id"], len(order)))
    return records


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def summarize(
    records: Sequence[Mapping],
    config: RunConfig,
    *,
    eval_s: float,
    wall_s: float,
    run_id: str | None,
    compile_s: float = 0.0,
) -> dict[str, Any]:
    """The run summary (see the module docstring); failed questions count as 0 in the score means."""
    n = len(records)
    recalls = [r["retrieval_recall"] for r in records if r["retrieval_recall"] is not None]
    return {
        "method": config.method,
        "dataset": config.dataset,
        "optimizer": config.optimizer,
        "lm": config.lm,
        "n": n,
        "failed": sum(r["error"] is not None for r in records),
        "em": round(100 * _mean([r["em"] for r in records]), 2),
        "f1": round(100 * _mean([r["f1"] for r in records]), 2),
        "acc": round(100 * _mean([r["acc"] for r in records]), 2),
        "retrieval_recall": round(100 * _mean(recalls), 2) if recalls else None,
        "lm_calls_per_question": round(_mean([r["lm_calls"] for r in records]), 3),
        "input_tokens_per_question": round(_mean([r["input_tokens"] for r in records]), 1),
        "output_tokens_per_question": round(_mean([r["output_tokens"] for r in records]), 1),
        "questions_per_minute": round(60 * n / eval_s, 2) if eval_s > 0 else 0.0,
        "compile_s": round(compile_s, 2),
        "wall_s": round(wall_s, 2),
        "mlflow_run_id": run_id,
    }


def write_tables(records: Sequence[Mapping], directory: Path) -> list[Path]:
    """The predictions as CSV and as a markdown table (one row per question; lists joined with ' | ')."""
    columns = [
        "id",
        "question",
        "prediction",
        "answers",
        "em",
        "f1",
        "acc",
        "retrieval_recall",
        "lm_calls",
        "input_tokens",
        "output_tokens",
        "latency_s",
        "passage_titles",
        "error",
    ]

    def cell(value: Any) -> str:
        if isinstance(value, list):
            return " | ".join(str(v) for v in value)
        return "" if value is None else str(value)

    csv_path = directory / "predictions.csv"
    with csv_path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns)
        for record in records:
            writer.writerow([cell(record.get(c)) for c in columns])
    md_path = directory / "predictions.md"
    short = ["id", "question", "prediction", "answers", "em", "f1", "lm_calls", "input_tokens", "error"]
    lines = ["| " + " | ".join(short) + " |", "|" + "---|" * len(short)]
    for record in records:
        lines.append("| " + " | ".join(cell(record.get(c)).replace("|", "/").replace("\n", " ") for c in short) + " |")
    md_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [csv_path, md_path]


def _slug(text: str) -> str:
    """A file-name-safe short form of an LM name or path (its last path component)."""
    return re.sub(r"[^A-Za-z0-9.]+", "-", text.rstrip("/").rsplit("/", 1)[-1]).strip("-")[:48]


def default_run_name(config: RunConfig) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{config.method}-{config.optimizer}-{config.dataset}-{_slug(config.lm)}-{stamp}"


def run_experiment(
    config: RunConfig,
    *,
    lm=None,
    retriever=None,
    examples: tuple[Sequence, Sequence] | None = None,
    parent_run_id: str | None = None,
    progress: bool = True,
    check_context: bool | None = None,
    compiled=None,
) -> dict[str, Any]:
    """Compile, evaluate and track one configuration; returns the summary dict (see the module docstring).

    Overrides, for tests and for the sweep that reuses loaded pieces across configurations: `lm` (any dspy LM,
    e.g. DummyLM, instead of `load_lm(config.lm)`), `retriever` (instead of building one from the corpus),
    `examples` ((train, eval) instead of reading the files; limits still apply) and `parent_run_id` (the MLflow
    run of a sweep, making this a child run). `check_context` (default: only for an LM loaded here) checks, before
    and after compiling, that the longest prompt fits the LM's context window (`check_fits_context`). `compiled`
    (a program of the same method, compiled earlier) has its state (demos, instructions) loaded into the program
    built from this config instead of compiling again: the sweep compiles once per method and shot count and
    reuses the result across document counts.
    """
    import dspy

    start = time.perf_counter()
    random.seed(config.seed)
    adapter = make_adapter(config.adapter)
    if check_context is None:
        check_context = lm is None
    if lm is None:
        lm = load_lm_for(config)
    if examples is None:
        train, evalset = load_examples(config)
    else:
        train = list(examples[0])[: config.train_limit] if config.train_limit else list(examples[0])
        evalset = list(examples[1])[: config.limit] if config.limit else list(examples[1])
    if not evalset:
        raise ConfigError(f"no evaluation questions in {config.eval_path}")
    if check_context:  # fail before indexing and before a run is opened: the demo-less prompt must fit already
        with dspy.context(lm=lm, adapter=adapter):
            fits_context(build_program(config, None), lm, adapter, [*train, *evalset])
    load_s = time.perf_counter() - start

    run_name = config.run_name or default_run_name(config)
    run_id = tracking.start_run(
        config.runs_dir,
        run_name=run_name,
        params=config.to_params(),
        parent_run_id=parent_run_id,
        tags={"method": config.method, "dataset": config.dataset, "optimizer": config.optimizer, "lm": config.lm},
    )
    work = config.runs_dir / "work" / run_id
    work.mkdir(parents=True, exist_ok=True)
    log.info("run %s (%s): %d train, %d eval questions; files in %s", run_name, run_id, len(train), len(evalset), work)
    try:
        index_start = time.perf_counter()
        if retriever is None and config.method != "closed-book":
            from ragscale.data import build_corpus
            from ragscale.programs.retrieval import build_retriever

            corpus = build_corpus(list(train) + list(evalset))
            log.info("indexing %d passages (%s)", len(corpus), config.retriever)
            retriever = build_retriever(
                corpus, kind=config.retriever, index_dir=config.runs_dir / "indexes", chroma_url=config.chroma_url
            )
        index_s = time.perf_counter() - index_start

        with dspy.context(lm=lm, adapter=adapter):
            program = build_program(config, retriever)
            compile_start = time.perf_counter()
            if compiled is not None:
                program.load_state(compiled.dump_state())
            else:
                program = compile_for(config, program, train, lm, adapter)
            compile_s = time.perf_counter() - compile_start
            program.save(str(work / PROGRAM))
            if check_context:
                fits_context(program, lm, adapter, [*train, *evalset])

            eval_start = time.perf_counter()
            records = evaluate(
                program, evalset, threads=config.threads, records_path=work / PREDICTIONS, progress=progress
            )
            eval_s = time.perf_counter() - eval_start

        summary = summarize(
            records, config, eval_s=eval_s, wall_s=time.perf_counter() - start, run_id=run_id, compile_s=compile_s
        )
        (work / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        (work / "config.toml").write_text(config.to_toml(), encoding="utf-8")
        tables = write_tables(records, work)
        tracking.log_metrics(
            config.runs_dir,
            run_id,
            {
                "em": summary["em"],
                "f1": summary["f1"],
                "acc": summary["acc"],
                "retrieval_recall": summary["retrieval_recall"],
                "effective_context_tokens_per_question": summary["input_tokens_per_question"],
                "output_tokens_per_question": summary["output_tokens_per_question"],
                "lm_calls_per_question": summary["lm_calls_per_question"],
                "questions_per_minute": summary["questions_per_minute"],
                "wall_s": summary["wall_s"],
                "load_s": load_s,
                "index_s": index_s,
                "compile_s": compile_s,
                "eval_s": eval_s,
                "n": summary["n"],
                "failed": summary["failed"],
            },
        )
        tracking.log_artifacts(
            config.runs_dir,
            run_id,
            [work / PREDICTIONS, *tables, work / PROGRAM, work / "config.toml", work / "summary.json"],
        )
    except BaseException as exc:
        # Keep what finished: the predictions written so far go to MLflow with the run marked failed (or killed).
        written = [path for path in (work / PREDICTIONS, work / PROGRAM) if path.exists()]
        try:
            tracking.log_artifacts(config.runs_dir, run_id, written)
        except Exception as logging_error:
            log.warning("could not log the partial artifacts of run %s: %s", run_id, logging_error)
        tracking.end_run(config.runs_dir, run_id, status="KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED")
        raise
    tracking.end_run(config.runs_dir, run_id)
    log.info(
        "run %s finished: EM %.1f F1 %.1f (%d failed) in %.0f s",
        run_id,
        summary["em"],
        summary["f1"],
        summary["failed"],
        summary["wall_s"],
    )
    return summary
