"""Evaluating a program: each question answered in its own usage meter and scored, then the run's summary.

``evaluate`` answers the questions with worker threads and appends each question's record to
``predictions.jsonl`` as soon as it finishes, so an interrupted run keeps what finished. A question whose program
raises is recorded with ``error`` ("Type: message") and scores 0 (EM, F1, Acc and, when the question has
supporting titles, retrieval recall): **failed questions count as 0 in the means**, so a method that crashes is
not rewarded by a smaller denominator. ``n`` counts every evaluated question, ``failed`` the crashed ones.

The summary (``SUMMARY_KEYS``; ``ragscale run --json FILE`` writes it): method, dataset, optimizer, lm, docs, shots
and iterations (the run's, named as in ``RunConfig``), n, failed, em, f1, acc, retrieval_recall (all four in
percent; recall is None for a program without a retriever or when no question has supporting titles),
lm_calls_per_question, ``EFFECTIVE_CONTEXT`` (the mean effective context: all input tokens of all LM calls of a
question; the same name in the MLflow metrics, ``compare`` and the sweep's ledger), output_tokens_per_question,
questions_per_minute and eval_s (evaluation only), compile_s (the teleprompter alone) with compile_lm_calls,
compile_input_tokens and compile_output_tokens (the calls compiling made, the teacher's included: never part of the
per-question figures), wall_s (the whole run: loading, indexing, compiling, evaluating), peak_rss_gb (the process's
peak resident memory so far, in GB: the run's own peak when it is the process's only run) and weights_gb (the bytes
of the local LM's weights as loaded, packed copies included; None for a server LM), corpus (``{"name", "passages",
"sha256"}`` of the corpus searched, None for a run that retrieves nothing), behaviour (``{name: mean}`` of the
method's defining step per question, see ``ragscale.programs.behaviour``: rates 0-1, counts per question; ``{}`` for
closed-book, RAG and DRAG), held_back_behaviour (``{name: mean}`` of each behaviour the method has a floor for, on
the training questions held back from compiling: ``optimizers/floors.py``; ``{}`` when nothing was compiled or the
method has no floors), resumed (the questions carried over from an earlier, killed or failed, attempt of the
same run: their records are counted like the others, but questions_per_minute counts only the questions answered in
this attempt), mlflow_run_id, model_uri (the compiled program as an MLflow model, ``runs:/<id>/model``: ``model.py``;
None when the run logged none).
"""

from __future__ import annotations

import contextvars
import csv
import io
import json
import logging
import os
import resource
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import dspy
from dspy.utils.exceptions import ContextWindowExceededError
from tqdm.auto import tqdm

from ragscale.experiments import traces
from ragscale.experiments.config import RunConfig
from ragscale.experiments.files import in_one_line, write_text, writing
from ragscale.experiments.signals import check_stop
from ragscale.optimizers.metrics import accuracy, exact_match, f1, retrieval_recall
from ragscale.programs import PROGRAMS
from ragscale.programs.lm import meter

log = logging.getLogger(__name__)

EFFECTIVE_CONTEXT = "effective_context_tokens_per_question"
"""The per-question effective context (input tokens of all LM calls), by one name end to end."""

SUMMARY_KEYS = (
    "method", "dataset", "optimizer", "lm", "docs", "shots", "iterations", "n", "failed", "em", "f1", "acc",
    "retrieval_recall", "lm_calls_per_question", EFFECTIVE_CONTEXT, "output_tokens_per_question",
    "questions_per_minute", "eval_s", "compile_s", "compile_lm_calls", "compile_input_tokens",
    "compile_output_tokens", "wall_s", "peak_rss_gb", "weights_gb", "corpus", "behaviour", "held_back_behaviour",
    "resumed", "mlflow_run_id", "model_uri",
)  # fmt: skip

PREDICTIONS = "predictions.jsonl"

STOP_POLL_S = 0.5
"""How often the evaluation, while it waits for its questions, asks whether its caller stopped it
(``signals.check_stop``): a sweep's time limit ends a run within this, even while a request hangs."""


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


def answer_one(program, example, *, retrieves: bool = True, refused: str | None = None) -> dict[str, Any]:
    """Run the program on one question inside its own usage meter and score it; never raises an Exception. A question
    ``refused`` (its error, "Type: message": its prompt cannot fit the LM's window) is not asked: its record is a
    failed one with that error.

    The record: id, question, prediction, answers, em, f1, acc, retrieval_recall (None when the question has no
    supporting titles or the program does not retrieve: `retrieves` False), lm_calls, input_tokens, output_tokens,
    latency_s, passage_ids, passage_titles, the prediction's ``record_fields`` (``recorded_fields``: the follow-ups
    a decomposing method asked and their answers, empty for a method without them), behaviour (the method's defining
    step on this question: ``program.behaviour``, ``{}`` for a failed question or a program without one), error
    (None, or "Type: message"; a prompt the LM refused as too long: the first line of its message, which gives the
    counts).
    """
    answers = list(example.answers)
    supporting = list(getattr(example, "supporting_titles", None) or []) if retrieves else []
    prediction, error, pred = "", refused, None
    start = time.perf_counter()
    with meter() as usage:
        try:
            if refused is None:
                # A fresh trace per question: the default one is a list shared by every thread.
                with dspy.context(trace=[]), traces.question(example):
                    pred = program(question=example.question)
                prediction = str(pred.answer)
        except Exception as exc:
            # a prompt the LM refused as too long: its counts, in the first line, without DSPy's advice after it
            message = str(exc).strip().splitlines()[0] if isinstance(exc, ContextWindowExceededError) else exc
            error = f"{type(exc).__name__}: {message}"
            log.warning("question %s failed: %s", example.id, in_one_line(error))
    latency = time.perf_counter() - start
    titles, ids = _titles_and_ids(getattr(pred, "passages", None) if pred is not None else None)
    ok = error is None
    behaviour = program.behaviour(example.question, pred) if ok else {}
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
        **recorded_fields(program, pred),
        "behaviour": behaviour,
        "error": error,
    }


def recorded_fields(program, prediction) -> dict[str, list]:
    """The list fields of ``prediction`` a record keeps: those ``program`` declares (``Method.record_fields``),
    and every other registered method's, empty, so that the records of every method have the same keys."""
    names = dict.fromkeys(name for method in (*PROGRAMS.values(), program) for name in method.record_fields)
    own = set(program.record_fields) if prediction is not None else set()
    return {name: list(getattr(prediction, name, None) or []) if name in own else [] for name in names}


def evaluate(
    program,
    examples: Sequence,
    *,
    threads: int,
    records_path: Path | None = None,
    progress: bool = True,
    on_record: Callable[[dict], None] | None = None,
    done: Sequence[Mapping] = (),
    refused: Mapping[str, str] | None = None,
) -> list[dict]:
    """Answer `examples` with `threads` workers, appending each record to `records_path` (if given) as it finishes.

    Each worker runs in a copy of the caller's context, so `dspy.context(lm=..., adapter=...)` set around this
    call (a contextvar in DSPy 3.4) reaches the worker threads, and each question's `meter()` is its own.
    Records are flushed one by one: an interrupted run keeps everything that finished. `done` (records of an
    earlier attempt, by question id) are written first and their questions are not asked again. `refused` (question
    id -> why) are recorded failed without being asked (``answer_one``).
    """
    ids = {str(ex.id) for ex in examples}
    records: list[dict] = [dict(r) for r in done if str(r["id"]) in ids]
    carried = {str(r["id"]) for r in records}
    todo = [ex for ex in examples if str(ex.id) not in carried]
    if records_path is not None:
        records_path.parent.mkdir(parents=True, exist_ok=True)
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="ragscale-eval")
    try:
        with (
            open(records_path or os.devnull, "wb", buffering=0) as out,
            tqdm(total=len(examples), initial=len(records), desc="evaluating", unit="q", disable=not progress) as bar,
        ):
            for record in records:
                _append(out, record, records_path)
            retrieves = program.retrieves  # a method that retrieves nothing has no recall to report
            refused = refused or {}
            futures = [
                pool.submit(contextvars.copy_context().run, answer_one, program, ex, retrieves=retrieves,
                            refused=refused.get(str(ex.id)))
                for ex in todo
            ]  # fmt: skip
            for future in _finishing(futures):
                record = future.result()
                _append(out, record, records_path)
                records.append(record)
                if on_record is not None:
                    on_record(record)
                bar.update(1)
                bar.set_postfix(
                    em=f"{100 * sum(r['em'] for r in records) / len(records):.1f}",
                    failed=sum(r["error"] is not None for r in records),
                )
    except BaseException:
        # Stopped (Ctrl-C, SIGTERM, the caller's check_stop) or failed: drop the queued questions and do not wait for
        # those being answered, so the run is marked and its records logged at once (a scheduler's SIGKILL follows
        # SIGTERM soon; a request to a hung server would hold the run until it gives up).
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    order = {str(ex.id): i for i, ex in enumerate(examples)}
    records.sort(key=lambda r: order.get(r["id"], len(order)))
    return records


def _append(out, record: Mapping, path: Path | None) -> None:
    """``record`` written as one JSON line to ``out`` (``path``'s file, unbuffered: a kill keeps it, and a write that
    failed leaves nothing behind to fail again when the file closes); a full or read-only disk raises the OSError
    naming ``path``."""
    line = memoryview((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
    with writing(path):
        while line:
            line = line[out.write(line) :]


def _finishing(futures: Sequence[Future]) -> Iterator[Future]:
    """``futures`` as they finish, as ``as_completed`` yields them; while it waits, ``check_stop`` is called every
    ``STOP_POLL_S`` and whenever a question finishes."""
    pending = set(futures)
    while pending:
        try:
            for future in as_completed(pending, timeout=STOP_POLL_S):
                pending.discard(future)
                yield future
                check_stop()
        except TimeoutError:  # none finished within STOP_POLL_S: as_completed's own
            check_stop()


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def behaviour_means(records: Sequence[Mapping]) -> dict[str, float]:
    """Each behaviour value's mean over the questions that report it (failed ones report none): a 0-1 rate for the
    ``*_rate`` and share names, a mean count for the others."""
    values: dict[str, list[float]] = {}
    for record in records:
        for name, value in (record.get("behaviour") or {}).items():
            values.setdefault(name, []).append(float(value))
    return {name: _mean(column) for name, column in values.items()}


def record_scores(records: Sequence[Mapping]) -> dict[str, Any]:
    """What a run's per-question records alone give of its summary: n, failed, em, f1, acc and retrieval_recall
    (percent), lm_calls_per_question, ``EFFECTIVE_CONTEXT``, output_tokens_per_question and behaviour, unrounded:
    a page rounds once, as it shows them. A committed copy of the records gives the same numbers again
    (``ragscale.published.runs``)."""
    recalls = [r["retrieval_recall"] for r in records if r["retrieval_recall"] is not None]
    return {
        "n": len(records),
        "failed": sum(r["error"] is not None for r in records),
        "em": 100 * _mean([r["em"] for r in records]),
        "f1": 100 * _mean([r["f1"] for r in records]),
        "acc": 100 * _mean([r["acc"] for r in records]),
        "retrieval_recall": 100 * _mean(recalls) if recalls else None,
        "lm_calls_per_question": _mean([r["lm_calls"] for r in records]),
        EFFECTIVE_CONTEXT: _mean([r["input_tokens"] for r in records]),
        "output_tokens_per_question": _mean([r["output_tokens"] for r in records]),
        "behaviour": behaviour_means(records),
    }


def summarize(
    records: Sequence[Mapping],
    config: RunConfig,
    *,
    eval_s: float,
    wall_s: float,
    run_id: str | None,
    compile_s: float = 0.0,
    compile_usage: Mapping[str, int] | None = None,
    weights_bytes: int | None = None,
    resumed: int = 0,
    corpus: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The run summary (see the module docstring); failed questions count as 0 in the score means.
    ``compile_usage`` (the counts of the LM calls compiling made: calls, input_tokens, output_tokens; and the
    ``held_back_behaviour`` measured after) gives the compile_* counts, 0 without it. ``resumed`` of the records
    were carried over from an earlier attempt. ``corpus`` is what the run retrieved from (its ``CorpusIdentity`` as
    a dict), None for a run that retrieves nothing."""
    usage = compile_usage or {"calls": 0, "input_tokens": 0, "output_tokens": 0}
    n = len(records)
    scores = record_scores(records)
    return {
        "method": config.method,
        "dataset": config.dataset,
        "optimizer": config.optimizer,
        "lm": config.lm,
        "docs": config.docs,
        "shots": config.shots,
        "iterations": config.iterations,
        **{key: scores[key] for key in ("n", "failed", "em", "f1", "acc", "retrieval_recall")},
        **{key: scores[key] for key in ("lm_calls_per_question", EFFECTIVE_CONTEXT, "output_tokens_per_question")},
        "questions_per_minute": round(60 * (n - resumed) / eval_s, 2) if eval_s > 0 else 0.0,
        "eval_s": round(eval_s, 2),
        "compile_s": round(compile_s, 2),
        "compile_lm_calls": usage["calls"],
        "compile_input_tokens": usage["input_tokens"],
        "compile_output_tokens": usage["output_tokens"],
        "wall_s": round(wall_s, 2),
        "peak_rss_gb": round(peak_rss_gb(), 2),
        "weights_gb": None if weights_bytes is None else round(weights_bytes / 1e9, 3),
        "corpus": dict(corpus) if corpus else None,
        "behaviour": scores["behaviour"],
        "held_back_behaviour": dict((compile_usage or {}).get("held_back_behaviour") or {}),
        "resumed": resumed,
        "mlflow_run_id": run_id,
        "model_uri": None,
    }


def peak_rss_gb() -> float:
    """The process's peak resident memory so far, in GB (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1e9 if sys.platform == "darwin" else peak * 1024 / 1e9


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
    table = io.StringIO(newline="")
    writer = csv.writer(table)
    writer.writerow(columns)
    for record in records:
        writer.writerow([cell(record.get(c)) for c in columns])
    write_text(csv_path, table.getvalue())
    md_path = directory / "predictions.md"
    short = ["id", "question", "prediction", "answers", "em", "f1", "lm_calls", "input_tokens", "error"]
    lines = ["| " + " | ".join(short) + " |", "|" + "---|" * len(short)]
    for record in records:
        lines.append("| " + " | ".join(cell(record.get(c)).replace("|", "/").replace("\n", " ") for c in short) + " |")
    write_text(md_path, "\n".join(lines) + "\n")
    return [csv_path, md_path]
