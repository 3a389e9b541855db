"""The experiment runner: compile a method on a train split, evaluate it on another, track it all in MLflow.

One concept in one file: one run, from its inputs to its MLflow record, and the pieces the sweep reuses.

``run_experiment(config)`` does, in order: load the train and eval examples (a bad file fails before any model
loads); load the LM (an unknown name fails before anything expensive); check that the method's longest prompt fits
the LM's window; read the corpus the config names (``data/corpora.py``: by default every paragraph of the dataset,
the same whatever the limits); find an unfinished run of the same configuration, data and corpus to resume
(``resume.py``), else open a new one; build the corpus's retriever (indexes under ``<runs_dir>/indexes``, named by
the corpus's digest and shared by every run that searches it); build the program; compile it on train with the
configured teleprompter and save it as JSON (a resumed run loads the one it saved); evaluate the questions not yet
answered (``evaluate.py``); then log the summary, the predictions (files, and a table MLflow's evaluation view
compares), the compiled program (as JSON, and as an MLflow model: ``model.py``) and the config to MLflow. While it
compiles, DSPy's compile logging goes into the run too (``traces.compile_logging``) unless ``autolog`` is off.

How a run ends: FINISHED; FAILED when it raises, or when more than ``max_failed`` of its questions failed
(``RunFailedError``, so that a run whose server was down is not read as a result); KILLED when Ctrl-C or SIGTERM stops
it. A run that did not finish keeps its predictions so far, logged to MLflow too, and the same command resumes it.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ragscale.experiments import resume, traces, tracking
from ragscale.experiments.config import ConfigError, RunConfig
from ragscale.experiments.evaluate import EFFECTIVE_CONTEXT, PREDICTIONS, evaluate, summarize, write_tables
from ragscale.experiments.files import exclusive, slug, write_json
from ragscale.experiments.identity import config_key, data_fingerprint
from ragscale.experiments.inputs import corpus_for
from ragscale.experiments.model import MODEL
from ragscale.experiments.provenance import data_files, provenance_tags
from ragscale.experiments.signals import interrupted

log = logging.getLogger(__name__)

PROGRAM = "program.json"

METRICS = (
    "em", "f1", "acc", "retrieval_recall", EFFECTIVE_CONTEXT, "output_tokens_per_question", "lm_calls_per_question",
    "questions_per_minute", "wall_s", "compile_s", "compile_lm_calls", "compile_input_tokens", "compile_output_tokens",
    "eval_s", "n", "failed", "peak_rss_gb", "resumed",
)  # fmt: skip
"""The summary's values logged as MLflow metrics (with load_s, index_s and each behaviour value as
``behaviour.<name>``)."""


EVALUATION_TABLE = "eval_results_table.json"
"""The per-question records as an MLflow table: the UI's evaluation view compares two runs question by question."""


MAX_FAILED = 0.5
"""The default largest fraction of a run's questions that may fail before the run counts as FAILED."""


class RunFailedError(RuntimeError):
    """Too many of a run's questions failed for its scores to mean anything; the run is marked FAILED."""


TEACHER_DECODE = "hf"
"""How a teacher's (and a reflection LM's) decode steps run: transformers' forward. A teacher answers a few dozen
training questions once; compiling its decode graphs would cost a minute and a copy of its weights per batch size,
memory the reader's own graphs then could not have."""


def load_named_lm(
    name: str, *, api_base: str | None = None, max_tokens: int = 256, cache: bool = True, weights: str | None = None,
    decode: str | None = None,
):  # fmt: skip
    """``load_lm(name)``; an unknown or unusable LM name becomes a ConfigError naming it."""
    from ragscale.programs.lm import load_lm

    local = {"decode": decode} if decode and not name.startswith("openai/") else {}
    try:
        return load_lm(name, api_base=api_base, max_tokens=max_tokens, cache=cache, weights=weights, **local)
    except (ValueError, FileNotFoundError) as exc:
        raise ConfigError(f"--lm {name!r}: {exc}") from exc


def local_weight_bytes(lm) -> int | None:
    """The bytes of a local LM's weights as loaded (``layouts.weight_bytes``); None for a server or scripted LM."""
    model = getattr(getattr(lm, "engine", None), "model", None)
    if model is None:
        return None
    from ragscale.programs.lm.layouts import weight_bytes

    return weight_bytes(model)


def load_lm_for(config: RunConfig):
    """``load_named_lm`` with the config's LM settings."""
    return load_named_lm(
        config.lm, api_base=config.api_base, max_tokens=config.max_tokens, cache=config.cache, weights=config.weights
    )


def teaches_itself(config: RunConfig) -> bool:
    """Whether the config's teacher is its reader: the same model on the same server (or both local). The reader
    then writes the traces itself, on its own engine, rather than on a second copy of its weights."""
    return config.teacher == config.lm and config.teacher_api_base == config.api_base


def load_teacher_for(config: RunConfig):
    """``load_named_lm`` of the config's teacher, on its own server if it has one, decoding by ``TEACHER_DECODE``."""
    return load_named_lm(
        config.teacher,
        api_base=config.teacher_api_base,
        max_tokens=config.max_tokens,
        cache=config.cache,
        weights=config.weights,
        decode=TEACHER_DECODE,
    )


def load_examples(config: RunConfig, given: tuple[Sequence, Sequence] | None = None) -> tuple[list, list]:
    """(train, eval) examples, read from the config's files unless ``given``, cut to ``train_limit`` and
    ``limit`` (the files' order, which is already shuffled)."""
    if given is None:
        from ragscale.data import load_jsonl, load_split

        train = load_split(config.dataset, "train", config.data_dir)
        if config.eval_file is not None:
            evalset = load_jsonl(config.eval_file)
        else:
            evalset = load_split(config.dataset, "dev", config.data_dir)
    else:
        train, evalset = given
    return list(train)[: config.train_limit], list(evalset)[: config.limit]


def build_retriever_for(config: RunConfig, train: Sequence, evalset: Sequence, *, corpus=None, progress=False):
    """The config's retriever over its corpus (``corpus``, else ``corpus_for``), whose ``corpus`` attribute says
    which (``Corpus.describe()``). Its indexes live under ``<runs_dir>/indexes``, named by the corpus's digest, so
    every run, dataset and sweep that searches one corpus shares them. Runs on one runs directory build their
    indexes one at a time, so two runs over the same corpus embed it once (the second finds it built) and never
    write one chromadb store together. ``progress`` draws a bar while an index is built."""
    from ragscale.programs.retrieval import build_retriever

    if corpus is None:
        corpus = corpus_for(config, train, evalset)
    index_dir = config.runs_dir / "indexes"
    log.info("corpus %s: %d passages, sha256 %s (%s index under %s)", corpus.name, len(corpus), corpus.sha256,
             config.retriever, index_dir)  # fmt: skip
    with exclusive(index_dir / "build.lock"):
        retriever = build_retriever(
            corpus.passages, kind=config.retriever, index_dir=index_dir, chroma_url=config.chroma_url,
            key=corpus.key, progress=progress,
        )  # fmt: skip
    retriever.corpus = corpus.describe()
    return retriever


def build_program_for(config: RunConfig, retriever):
    """The config's method with its documents per query (and its iterations, if it iterates) over ``retriever``."""
    from ragscale.programs import build_program

    return build_program(config.method, retriever, k=config.docs, iterations=config.iterations)


def compile_for(config: RunConfig, program, trainset: Sequence, lm, adapter=None, teacher_lm=None, reflection_lm=None):
    """Compile ``program`` on ``trainset`` with the configured teleprompter (``none`` returns it as it is), the
    teacher copy on ``teacher_lm`` when given; its Grade predictors (CRAG, Self-RAG) are then compiled on their own
    relevance labels (``compile_graders``), with the same teacher."""
    from ragscale.optimizers.method import compile_method
    from ragscale.optimizers.metrics import METRICS as SCORES

    return compile_method(
        program, trainset, optimizer=config.optimizer, metric=SCORES[config.metric], shots=config.shots,
        docs_per_demo=config.docs_per_demo, threads=config.threads, lm=lm, adapter=adapter, seed=config.seed,
        teacher_lm=teacher_lm, reflection_lm=reflection_lm, budget=config.budget,
    )  # fmt: skip


def corpus_params(corpus) -> dict[str, str]:
    """The MLflow params that name a run's corpus beside ``corpus`` (the name it was asked by): its passages and
    its sha256; none for a run that retrieves nothing."""
    if not corpus:
        return {}
    return {"corpus_passages": str(corpus["passages"]), "corpus_sha256": corpus["sha256"]}


def oracle_params(retriever) -> dict[str, str]:
    """The MLflow param that names a retriever given to a run by what it returns (an oracle row's), so the run is
    told apart from the method's own; none for any other retriever."""
    identity = getattr(retriever, "identity", None)
    return {"retriever_identity": identity} if identity else {}


def log_model(config: RunConfig, run_id: str, program, corpus) -> str | None:
    """Log the run's program as an MLflow model (``model.py``: code and JSON, no pickle) and return its URI; None
    for a program searching a retriever given to the run (an oracle's, a sweep's), which the model cannot carry. A
    failure to log it is a warning: the run's results stand without it."""
    from ragscale.experiments.model import Searched, log_program

    if program.retrieves and corpus is None:
        return None
    searched = None
    if corpus is not None:
        searched = Searched(corpus, config.retriever, index_dir=config.runs_dir / "indexes",
                            chroma_url=config.chroma_url, data_dir=config.data_dir)  # fmt: skip
    lm = {"lm": config.lm, "api_base": config.api_base, "max_tokens": config.max_tokens, "weights": config.weights}
    try:
        with tracking.active(config.runs_dir, run_id):
            log_program(program, lm=lm, adapter=config.adapter, searched=searched)
    except Exception as exc:
        log.warning("run %s: its program could not be logged as an MLflow model: %s", run_id, exc)
        return None
    return f"runs:/{run_id}/{MODEL}"


def default_run_name(config: RunConfig) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{config.method}-{config.optimizer}-{config.dataset}-{slug(config.lm)}-{stamp}"


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
    teacher_lm=None,
    fresh: bool = False,
    max_failed: float = MAX_FAILED,
    carried: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """Compile, evaluate and track one configuration; returns the summary (``evaluate.SUMMARY_KEYS``).

    An unfinished run with the same configuration and questions (killed, failed, or left RUNNING by a process that
    died) is resumed: its finished questions and compiled program are kept, and only the rest is computed;
    ``fresh`` starts a new run instead. More than ``max_failed`` (a fraction, 0-1) of the questions failing, or
    all of them, ends the run FAILED and raises ``RunFailedError`` after logging what it has.

    Overrides, for tests and for the sweep that reuses loaded pieces across configurations: ``lm`` (any dspy LM,
    e.g. DummyLM, instead of ``load_lm(config.lm)``), ``retriever`` (instead of building one from the corpus),
    ``examples`` ((train, eval) instead of reading the files; limits still apply) and ``parent_run_id`` (the MLflow
    run of a sweep, making this a child run). ``check_context`` (default: only for an LM loaded here) checks,
    before and after compiling, that the longest prompt fits the LM's context window (``fits_context``).
    ``compiled`` (a program of the same method, compiled earlier) has its state (demos, instructions) loaded into
    the program built from this config instead of compiling again: the sweep compiles once per method and shot
    count and reuses the result across document counts. ``teacher_lm`` (any dspy LM) replaces
    ``load_lm(config.teacher)``; a teacher that is the reader (``teaches_itself``) is the reader's LM; a teacher or
    reflection LM loaded here is released once the program is compiled (``release_lm``), leaving its memory to the
    student's decode graphs. ``carried`` are records of a finished run whose program asks those questions exactly as
    this one does (the sweep's IterDRAG under a smaller iteration cap, ``sweep/carry.py``): they count as answered,
    as a resumed run's do, and only the other questions are asked.
    """
    import dspy

    from ragscale.optimizers.context import fits_context
    from ragscale.programs import method_named
    from ragscale.programs.lm import make_adapter, meter, release_lm

    if not 0 <= max_failed <= 1:
        raise ConfigError(f"max_failed must be a fraction between 0 and 1, got {max_failed}")
    start = time.perf_counter()
    random.seed(config.seed)
    adapter = make_adapter(config.adapter)
    train, evalset = load_examples(config, examples)
    if not evalset:
        raise ConfigError(f"no evaluation questions in {config.eval_path}")
    if check_context is None:
        check_context = lm is None
    if lm is None:
        lm = load_lm_for(config)
    corpus = None
    if retriever is None and method_named(config.method).retrieves:  # read now: the run's key names the corpus
        corpus = corpus_for(config, train, evalset)
    passages = corpus.passages if corpus is not None else None
    if check_context:  # fail before indexing and before a run is opened: the demo-less prompt must fit already
        with dspy.context(lm=lm, adapter=adapter):
            fits_context(build_program_for(config, None), lm, adapter, [*train, *evalset], passages=passages)
    load_s = time.perf_counter() - start

    searched = corpus.describe() if corpus is not None else getattr(retriever, "corpus", None)
    key = config_key(config, data_fingerprint(train, evalset), program=compiled, retriever=retriever, corpus=searched)
    produced_by = provenance_tags(config, corpus=searched)  # before the lock: it may hash a model file
    with exclusive(config.runs_dir / "runs.lock"):  # one step: two processes never take over the same run
        found = None if fresh else resume.find_resumable(config.runs_dir, key)
        if found is not None:
            run_id, lock = found
            tracking.reopen_run(
                config.runs_dir, run_id, {"mlflow.parentRunId": parent_run_id} if parent_run_id is not None else None
            )
        else:
            run_id = tracking.start_run(
                config.runs_dir,
                run_name=config.run_name or default_run_name(config),
                params={**config.to_params(), **corpus_params(searched), **oracle_params(retriever)},
                parent_run_id=parent_run_id,
                tags={
                    "method": config.method,
                    "dataset": config.dataset,
                    "optimizer": config.optimizer,
                    "lm": config.lm,
                    resume.RUN_KEY_TAG: key,
                    **produced_by,
                },
            )
            lock = resume.claim(config.runs_dir / "work" / run_id)
    work = config.runs_dir / "work" / run_id
    log.info("run %s: %d train, %d eval questions; files in %s", run_id, len(train), len(evalset), work)
    try:
        if found is None:
            tracking.log_data_files(config.runs_dir, run_id, data_files(config))
        done = resume.finished_records(work / PREDICTIONS) if found is not None else []
        if found is not None:
            log.info("resuming run %s: %d of %d questions already answered", run_id, len(done), len(evalset))
        answered = {str(r["id"]) for r in done}
        carry = [dict(r) for r in carried if str(r["id"]) not in answered]
        if carry:
            log.info("run %s: %d questions carried from a run that asks them the same way", run_id, len(carry))
            done = [*done, *carry]
        index_start = time.perf_counter()
        if corpus is not None:
            retriever = build_retriever_for(config, train, evalset, corpus=corpus, progress=progress)
        index_s = time.perf_counter() - index_start

        with dspy.context(lm=lm, adapter=adapter):
            program = build_program_for(config, retriever)
            cost = resume.load_compile(work) if found is not None and (work / PROGRAM).exists() else None
            if cost is not None:
                program.load(str(work / PROGRAM))
            else:
                compile_start = time.perf_counter()
                with meter() as usage:
                    if compiled is not None:
                        program.load_state(compiled.dump_state())
                    else:
                        loaded = []  # the LMs loaded here: released once compiled, for the student's decode graphs
                        if teacher_lm is None and config.teacher is not None:  # only when compiling here
                            if teaches_itself(config):
                                teacher_lm = lm
                            else:
                                teacher_lm = load_teacher_for(config)
                                loaded.append(teacher_lm)
                        reflection_lm = None
                        if config.reflection_lm is not None:
                            reflection_lm = load_named_lm(  # room for a rewritten instruction
                                config.reflection_lm,
                                max_tokens=max(config.max_tokens, 1024),
                                cache=config.cache,
                                weights=config.weights,
                                decode=TEACHER_DECODE,
                            )
                            loaded.append(reflection_lm)
                        logged = traces.compile_logging(config.runs_dir, run_id) if config.autolog else None
                        try:
                            with logged or contextlib.nullcontext():
                                program = compile_for(config, program, train, lm, adapter, teacher_lm, reflection_lm)
                        finally:
                            for helper in loaded:
                                release_lm(helper)
                cost = {
                    "compile_s": time.perf_counter() - compile_start,
                    "calls": usage.calls,
                    "input_tokens": usage.input_tokens,
                    "output_tokens": usage.output_tokens,
                }
                program.save(str(work / PROGRAM))
                resume.save_compile(work, cost)
            if check_context:
                fits_context(program, lm, adapter, [*train, *evalset], passages=passages)

            eval_start = time.perf_counter()
            traced = traces.tracing(config.runs_dir, run_id) if config.trace else contextlib.nullcontext()
            with traced:
                records = evaluate(
                    program, evalset, threads=config.threads, records_path=work / PREDICTIONS, progress=progress,
                    done=done,
                )  # fmt: skip
            eval_s = time.perf_counter() - eval_start

        summary = summarize(
            records,
            config,
            eval_s=eval_s,
            wall_s=time.perf_counter() - start,
            run_id=run_id,
            compile_s=cost["compile_s"],
            compile_usage=cost,
            weights_bytes=local_weight_bytes(lm),
            resumed=len(done),
            corpus=searched,
        )
        failed, n = summary["failed"], summary["n"]
        too_many_failed = failed == n or failed > max_failed * n
        if not too_many_failed:  # a failed run is resumed, and logs its model and table once, when it finishes
            summary["model_uri"] = log_model(config, run_id, program, corpus)
        write_json(work / "summary.json", summary, indent=2)
        (work / "config.toml").write_text(config.to_toml(), encoding="utf-8")
        tables = write_tables(records, work)
        metrics = {name: summary[name] for name in METRICS}
        metrics.update({f"behaviour.{name}": value for name, value in summary["behaviour"].items()})
        if summary["weights_gb"] is not None:
            metrics["weights_gb"] = summary["weights_gb"]
        tracking.log_metrics(config.runs_dir, run_id, {**metrics, "load_s": load_s, "index_s": index_s})
        tracking.log_artifacts(
            config.runs_dir,
            run_id,
            [work / PREDICTIONS, *tables, work / PROGRAM, work / "config.toml", work / "summary.json"],
        )
        if too_many_failed:
            first = next(r["error"] for r in records if r["error"] is not None)
            raise RunFailedError(
                f"run {run_id}: {failed} of {n} questions failed (more than max_failed {max_failed:.0%}); "
                f"the first error: {first}. Fix the cause and rerun the same command: it resumes the run and asks "
                "the failed questions again"
            )
        tracking.log_table(config.runs_dir, run_id, records, EVALUATION_TABLE)
        tracking.end_run(config.runs_dir, run_id)  # before the lock is let go: a finished run is never taken over
    except BaseException as exc:
        # Keep what finished: the predictions written so far go to MLflow with the run marked failed (or killed).
        written = [path for path in (work / PREDICTIONS, work / PROGRAM) if path.exists()]
        try:
            tracking.log_artifacts(config.runs_dir, run_id, written)
            tracking.end_run(config.runs_dir, run_id, status="KILLED" if interrupted(exc) else "FAILED")
        except Exception as tracking_error:  # the run's own error is the one to report
            log.warning("could not log the partial artifacts or the status of run %s: %s", run_id, tracking_error)
        raise
    finally:
        lock.close()
    log.info(
        "run %s finished: EM %.1f F1 %.1f (%d failed, %d resumed) in %.0f s",
        run_id,
        summary["em"],
        summary["f1"],
        summary["failed"],
        summary["resumed"],
        summary["wall_s"],
    )
    return summary
