"""The experiment runner: compile a method on a train split, evaluate it on another, track it all in MLflow.

One concept in one file: one run, from its inputs to its MLflow record. The parts it is made of are loaded and built
in ``parts.py`` (the sweep loads them once for all its runs); its MLflow record is written by ``record.py``.

``run_experiment(config)`` does, in order: load the train and eval examples (a bad file fails before any model loads);
load the LM (an unknown name fails before anything expensive); check that the method's prompts fit the LM's window
(``_fits``: a config error when the documents or demonstrations make every prompt too long, or when a train question is
too long, since any train question may become a demonstration that sits in every prompt); read the corpus the config
names (``data/corpora.py``: by default every paragraph of the dataset, the same whatever the limits); find an unfinished
run of the same configuration, data and corpus to resume (``resume.py``), else open a new one; build the corpus's
retriever (indexes under ``<runs_dir>/indexes``, named by the corpus's digest and shared by every run that searches it);
build the program; compile it on train with the configured teleprompter and save it as JSON (a resumed run loads the one
it saved); check the compiled program's prompts again, and find the eval questions whose own text makes their prompt too
long (``_refused``): each of those fails alone, its record naming it and its token count, and the others run; evaluate
the questions not yet answered (``evaluate.py``); then log the summary, the predictions (files, and a table MLflow's
evaluation view compares), the compiled program (as JSON, and as an MLflow model: ``model.py``) and the config to
MLflow. While it compiles, DSPy's compile logging goes into the run too (``traces.compile_logging``) unless ``autolog``
is off.

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
from dataclasses import asdict
from pathlib import Path
from typing import Any

import dspy

from ragscale.experiments import parts, record, resume, traces, tracking
from ragscale.experiments.config import ConfigError, RunConfig
from ragscale.experiments.evaluate import PREDICTIONS, evaluate, summarize
from ragscale.experiments.files import in_one_line, unnamed_disk_error, writing
from ragscale.experiments.identity import config_key, data_fingerprint
from ragscale.experiments.inputs import corpus_for
from ragscale.experiments.provenance import data_files, provenance_tags
from ragscale.experiments.record import PROGRAM
from ragscale.optimizers.context import ContextWindowError, fits_context, overlong
from ragscale.programs import method_named
from ragscale.programs.lm import make_adapter, meter, release_lm

log = logging.getLogger(__name__)

MAX_FAILED = 0.5
"""The default largest fraction of a run's questions that may fail before the run counts as FAILED."""


class RunFailedError(RuntimeError):
    """Too many of a run's questions failed for its scores to mean anything; the run is marked FAILED."""


def run_experiment(
    config: RunConfig,
    *,
    lm=None,
    retriever=None,
    corpus=None,
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
    ``corpus`` (the corpus it searches, loaded: ``check_inputs``'; with ``retriever``, the one that retriever searches),
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
    if not 0 <= max_failed <= 1:
        raise ConfigError(f"max_failed must be a fraction between 0 and 1, got {max_failed}")
    start = time.perf_counter()
    check_context = lm is None if check_context is None else check_context
    train, evalset, lm, adapter, index, searched = _inputs(config, lm, (retriever, corpus), examples, check_context)
    load_s = time.perf_counter() - start

    key = config_key(config, data_fingerprint(train, evalset), program=compiled, retriever=retriever, corpus=searched)
    run_id, lock, resumed = _open(config, key, searched, retriever, parent_run_id=parent_run_id, fresh=fresh)
    work = config.runs_dir / "work" / run_id
    log.info("run %s: %d train, %d eval questions; files in %s", run_id, len(train), len(evalset), work)
    try:
        if not resumed:
            tracking.log_data_files(config.runs_dir, run_id, data_files(config))
        done = _answered(run_id, work, resumed, carried, len(evalset))
        index_start = time.perf_counter()
        if index is not None:
            retriever = parts.build_retriever_for(config, train, evalset, corpus=index, progress=progress)
        timings = {"load_s": load_s, "index_s": time.perf_counter() - index_start}

        with dspy.context(lm=lm, adapter=adapter):
            program = parts.build_program_for(config, retriever)
            program, cost = _compiled(config, program, train, (lm, adapter), work, compiled=compiled,
                                      teacher_lm=teacher_lm, resumed=resumed)  # fmt: skip
            passages = getattr(index, "passages", None)
            refused = _refused(program, (lm, adapter), evalset, passages) if check_context else {}
            records, eval_s = _ask(config, program, evalset, work, done=done, progress=progress, refused=refused)

        summary = summarize(records, config, eval_s=eval_s, wall_s=time.perf_counter() - start, run_id=run_id,
                            compile_s=cost["compile_s"], compile_usage=cost, weights_bytes=parts.local_weight_bytes(lm),
                            resumed=len(done), corpus=searched and asdict(searched))  # fmt: skip
        _conclude(config, run_id, (work, records), summary, (program, index), max_failed, timings=timings)
    except BaseException as exc:
        record.keep_partial(config, run_id, work, exc)  # the predictions so far, the run marked failed (or killed)
        named = unnamed_disk_error(exc, config.runs_dir)  # a write that named no file went under the runs directory
        if named is not None:
            raise named from exc
        raise
    finally:
        lock.close()
    return summary


def _open(config: RunConfig, key: str, searched, retriever, *, parent_run_id: str | None, fresh: bool):
    """``record.open_run`` for the run keyed ``key``, named by the corpus it searches (``searched``) and an oracle's
    ``retriever``, tagged with what produced it (``provenance_tags``, before the lock: it may hash a model file)."""
    names = {**record.corpus_params(searched), **record.oracle_params(retriever)}
    tags = provenance_tags(config, corpus=searched)
    return record.open_run(config, key, params=names, tags=tags, parent_run_id=parent_run_id, fresh=fresh)


def _inputs(config: RunConfig, lm, given: tuple, examples, check_context: bool) -> tuple:
    """(train, eval, lm, adapter, index, searched), Python's random seeded first: the run's examples
    (``load_examples``), ``lm`` or the config's loaded, its adapter, the corpus its retriever is built over
    (``given``: (retriever, corpus); the given corpus, else read now: the run's key names it; None for a run given a
    retriever or one that retrieves nothing) and the ``CorpusIdentity`` of what it searches (given a retriever, the
    given corpus's). With ``check_context``, the demo-less prompt must fit the LM's window already, before anything
    is indexed or a run opened (``_fits``)."""
    random.seed(config.seed)
    adapter = make_adapter(config.adapter)
    train, evalset = parts.load_examples(config, examples)
    if not evalset:
        raise ConfigError(f"no evaluation questions in {config.eval_path}")
    if lm is None:
        lm = parts.load_lm_for(config)
    retriever, corpus = given
    index = None
    if retriever is None and method_named(config.method).retrieves:
        index = corpus if corpus is not None else corpus_for(config, train, evalset)
    if check_context:
        with dspy.context(lm=lm, adapter=adapter):
            _fits(config, parts.build_program_for(config, None), (lm, adapter), (train, evalset),
                  getattr(index, "passages", None))  # fmt: skip
    named = index if retriever is None else corpus
    return train, evalset, lm, adapter, index, named.identity if named is not None else None


def _fits(config: RunConfig, program, reader: tuple, examples: tuple[Sequence, Sequence], passages) -> None:
    """Raise ``ContextWindowError`` when the prompts of ``program`` on the reader ``(lm, adapter)`` cannot fit its
    window whatever the question: built around the shortest eval question of ``examples`` (train, eval), or around
    a train question. A train question too long fails the run rather than itself: a teleprompter may make any train
    question a demonstration, which sits in every prompt, so its error names it and its file to fix."""
    (lm, adapter), (train, evalset) = reader, examples
    shortest = min((ex.question for ex in evalset), key=len)
    fits_context(program, lm, adapter, [*train, *evalset], passages=passages, question=shortest)
    too_long = overlong(program, lm, adapter, train, passages=passages)
    if too_long:
        error = next(iter(too_long.values()))
        raise ContextWindowError(
            f"train {error}: a demonstration made of it would not fit either; shorten it or leave it out of "
            f"{config.train_path}", tokens=error.tokens, reserve=error.reserve, window=error.window,
        )  # fmt: skip


def _refused(program, reader: tuple, evalset: Sequence, passages) -> dict[str, str]:
    """The eval questions that ``program`` (compiled) cannot ask on the reader ``(lm, adapter)``, by id, each with
    its error ("Type: message", as a failed question's record holds it); raises ``ContextWindowError`` when its
    demonstrations make every prompt too long (around the shortest question), which is the config's fault."""
    lm, adapter = reader
    shortest = min((ex.question for ex in evalset), key=len)
    fits_context(program, lm, adapter, evalset, passages=passages, question=shortest)
    refused = overlong(program, lm, adapter, evalset, passages=passages)
    for question_id, error in refused.items():
        log.warning("question %s is not asked: %s", question_id, error)
    return {question_id: f"{type(error).__name__}: {error}" for question_id, error in refused.items()}


def _conclude(
    config: RunConfig, run_id: str, results: tuple, summary: dict[str, Any], made: tuple, max_failed: float, *,
    timings: Mapping[str, float],
) -> None:  # fmt: skip
    """Record a run whose questions were all asked: ``results`` (its work folder, its records) and ``summary`` logged,
    with its program (``made``: the program, the corpus it searched) as an MLflow model; ends the MLflow run
    FINISHED, or raises ``RunFailedError`` when more than ``max_failed`` of its questions failed."""
    (work, records), (program, corpus) = results, made
    failed, n = summary["failed"], summary["n"]
    too_many_failed = failed == n or failed > max_failed * n
    if not too_many_failed:  # a failed run is resumed, and logs its model and table once, when it finishes
        summary["model_uri"] = record.log_model(config, run_id, program, corpus, work)
    record.log_results(config, run_id, work, records, summary, timings)
    if too_many_failed:
        first = next(r for r in records if r["error"] is not None)
        raise RunFailedError(
            f"run {run_id}: {failed} of {n} questions failed (more than max_failed {max_failed:.0%}); "
            f"the first error (question {first['id']}): {in_one_line(first['error'])}. Fix the cause and rerun the "
            "same command: it resumes the run and asks the failed questions again"
        )
    record.finish(config, run_id, records)  # before the lock is let go: a finished run is never taken over
    log.info("run %s finished: EM %.1f F1 %.1f (%d failed, %d resumed) in %.0f s", run_id, summary["em"],
             summary["f1"], summary["failed"], summary["resumed"], summary["wall_s"])  # fmt: skip


def _ask(
    config: RunConfig, program, evalset: Sequence, work: Path, *, done: Sequence, progress: bool,
    refused: Mapping[str, str],
) -> tuple[list, float]:  # fmt: skip
    """The records of ``evalset`` answered by ``program`` (those in ``done`` kept, those ``refused`` failed with
    their error unasked), written to ``work`` as they finish, traced in MLflow when the config says ``trace``; and
    the seconds it took."""
    start = time.perf_counter()
    with traces.tracing(config.runs_dir, work.name) if config.trace else contextlib.nullcontext():
        records = evaluate(program, evalset, threads=config.threads, records_path=work / PREDICTIONS,
                           progress=progress, done=done, refused=refused)  # fmt: skip
    return records, time.perf_counter() - start


def _answered(
    run_id: str, work: Path, resumed: bool, carried: Sequence[Mapping[str, Any]], questions: int
) -> list[dict[str, Any]]:
    """The records of the questions already answered: a resumed run's finished ones, and those ``carried`` from a
    run that asks them the same way."""
    done = resume.finished_records(work / PREDICTIONS) if resumed else []
    if resumed:
        log.info("resuming run %s: %d of %d questions already answered", run_id, len(done), questions)
    answered = {str(r["id"]) for r in done}
    carry = [dict(r) for r in carried if str(r["id"]) not in answered]
    if carry:
        log.info("run %s: %d questions carried from a run that asks them the same way", run_id, len(carry))
        done = [*done, *carry]
    return done


def _compiled(
    config: RunConfig, program, train: Sequence, reader: tuple, work: Path, *, compiled, teacher_lm, resumed: bool
) -> tuple[Any, Mapping[str, Any]]:
    """``program`` compiled, and what compiling cost: the one a resumed run saved, else ``compiled``'s state loaded,
    else compiled here on ``train`` (``_compile_here``) with the reader ``(lm, adapter)``; one compiled or loaded
    now is saved in ``work`` with its cost, and the means its floors were checked on are logged as the run's params
    ``held_back.<name>``."""
    cost = resume.load_compile(work) if resumed and (work / PROGRAM).exists() else None
    if cost is not None:
        program.load(str(work / PROGRAM))
        return program, cost
    compile_start = time.perf_counter()
    with meter() as usage:
        if compiled is not None:
            program.load_state(compiled.dump_state())
        else:
            program = _compile_here(config, program, train, reader, work.name, teacher_lm=teacher_lm)
    held_back = getattr(compiled if compiled is not None else program, "held_back_behaviour", {})
    cost = {
        "compile_s": time.perf_counter() - compile_start,
        "calls": usage.calls,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "held_back_behaviour": held_back,
    }
    if held_back:  # what the program kept of its method's step, measured once, where it was compiled
        tracking.log_params(config.runs_dir, work.name, {f"held_back.{k}": round(v, 4) for k, v in held_back.items()})
    with writing(work / PROGRAM):
        program.save(str(work / PROGRAM))
    resume.save_compile(work, cost)
    return program, cost


def _compile_here(config: RunConfig, program, train: Sequence, reader: tuple, run_id: str, *, teacher_lm):
    """``compile_for`` with the config's teacher (``teacher_lm`` if given; the reader if it ``teaches_itself``) and
    reflection LM, each loaded here released once compiled (``release_lm``), leaving its memory to the student's
    decode graphs; DSPy's compile logging goes into the run unless ``autolog`` is off."""
    lm, adapter = reader
    loaded = []  # the LMs loaded here: released once compiled, for the student's decode graphs
    if teacher_lm is None and config.teacher is not None:
        if parts.teaches_itself(config):
            teacher_lm = lm
        else:
            teacher_lm = parts.load_teacher_for(config)
            loaded.append(teacher_lm)
    reflection_lm = None
    if config.reflection_lm is not None:
        reflection_lm = parts.load_named_lm(  # room for a rewritten instruction
            config.reflection_lm, max_tokens=max(config.max_tokens, 1024), cache=config.cache, weights=config.weights,
            decode=parts.TEACHER_DECODE, request_timeout=config.request_timeout,
        )  # fmt: skip
        loaded.append(reflection_lm)
    logged = traces.compile_logging(config.runs_dir, run_id) if config.autolog else None
    try:
        with logged or contextlib.nullcontext():
            return parts.compile_for(config, program, train, lm, adapter, teacher_lm, reflection_lm)
    finally:
        for helper in loaded:
            release_lm(helper)
