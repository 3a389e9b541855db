"""How a program learns its demonstrations: the teleprompters by name, and ``compile_program``.

``OPTIMIZERS`` maps the CLI names to compile functions, all called the same way by ``compile_program``:

- ``none``: the program zero-shot (a reset copy).
- ``labeled``: ``LabeledWithDocuments`` (``demos.py``), DSPy's LabeledFewShot whose demonstrations carry the
  documents the program's own retriever finds for each demonstration's question (Yue et al. 2024, DRAG).
- ``bootstrap``: ``dspy.BootstrapFewShot`` (``ThreadedBootstrapFewShot`` in ``bootstrap.py``: the teacher runs
  on ``threads`` training examples at a time); demonstrations are the program's own traces that pass the metric,
  so they hold the documents retrieved during the trace. As DSPy's ``max_labeled_demos`` does with raw examples,
  the teacher first gets labeled demonstrations (``labeled``, with documents and, where the data has them, gold
  decompositions: the form it then writes its steps in) of the first ``shots`` shuffled training examples,
  and runs on the others (a training set no larger than ``shots`` is all run on, with no labeled demos shown);
  predictors left short of ``shots`` are topped up with labeled demonstrations.
- ``random-search``: ``dspy.BootstrapFewShotWithRandomSearch`` over ``num_candidates`` bootstrapped sets.
- ``mipro``: ``dspy.MIPROv2(auto="light")``: instructions and bootstrapped demonstrations searched together
  (needs ``optuna``).
- ``gepa``: ``dspy.GEPA``: instructions evolved by a reflection LM (``reflection_lm``, else the teacher, else the
  student) that reads each prediction's score and what went wrong (``feedback.with_feedback``), within
  ``budget``: ``light``, ``medium`` or ``heavy`` (GEPA's ``auto``) or a cap on metric calls; the calls it used
  are logged.

The bootstrap family (bootstrap, random-search, mipro) runs DSPy's teacher program -- a copy of the program --
on the training questions and keeps its traces as demonstrations. With ``teacher_lm`` the teacher copy runs on
that LM (DSPy's ``teacher_settings``): a larger local model writes the traces the student learns from, and the
student and the teacher share nothing but the program's structure. A trace is kept only if it passes the metric
*and* shows the method's defining step (``keeping_behaviour``: the program's ``demonstrates(example,
prediction)``, e.g. IterDRAG's follow-ups on a multi-hop question): otherwise, for a small model, the passing
traces are the ones that skip the step, and the compiled program learns to skip it.

random-search and mipro score their candidates on ``valset`` before the caps below are applied and are not
topped up with labeled demonstrations: what they pick is what they measured, less any documents over the cap.

After any of them ``cap_demos`` (``demos.py``) keeps at most ``shots`` demonstrations per predictor and
``docs_per_demo`` documents per demonstration, the most relevant kept, last (DRAG's order); a program whose
class sets ``demo_documents = False`` (RAG) has its demonstrations' documents dropped.
"""

import importlib.util
import logging
import random
from collections.abc import Callable, Sequence
from typing import Any

import dspy

from ragscale.optimizers.bootstrap import ThreadedBootstrapFewShot
from ragscale.optimizers.demos import LabeledWithDocuments, cap_demos
from ragscale.programs.base import Method

logger = logging.getLogger(__name__)

Metric = Callable[..., float]


def keeping_behaviour(metric: Metric, program: Method) -> Metric:
    """``metric``, except that a bootstrapped trace (``trace`` given) of a program that does not show its defining
    step (``program.demonstrates(example, prediction)`` False) scores 0. Scoring without a trace (candidates,
    evaluation) is unchanged. A program that keeps ``Method``'s own ``demonstrates`` (every trace shows its step)
    keeps ``metric`` as it is."""
    if type(program).demonstrates is Method.demonstrates:
        return metric

    def accepted(example: dspy.Example, prediction: dspy.Prediction, trace=None) -> float:
        score = metric(example, prediction, trace)
        if trace is None or program.demonstrates(example, prediction):
            return score
        return 0.0

    accepted.__name__ = getattr(metric, "__name__", "metric")
    return accepted


def _none(program: Method, trainset: list, **_: Any) -> Method:
    return program.reset_copy()


def _labeled(program: Method, trainset: list, *, shots: int, docs_per_demo: int, seed: int, **_: Any) -> Method:
    return LabeledWithDocuments(shots, docs_per_demo, seed).compile(program, trainset=trainset)


def _bootstrap(
    program: Method,
    trainset: list,
    *,
    metric: Metric,
    shots: int,
    docs_per_demo: int,
    seed: int,
    max_attempts: int | None,
    teacher_settings: dict,
    threads: int = 1,
    **_: Any,
) -> Method:
    trainset = random.Random(seed).sample(trainset, len(trainset))
    shown = trainset[:shots] if len(trainset) > shots else []  # shown to the teacher, not run on
    attempted = trainset[len(shown) :]
    teacher = _labeled(program, shown, shots=shots, docs_per_demo=docs_per_demo, seed=seed)
    teleprompter = ThreadedBootstrapFewShot(
        metric=metric,
        max_bootstrapped_demos=shots,
        max_labeled_demos=0,
        teacher_settings=teacher_settings,
        threads=threads,
    )
    compiled = teleprompter.compile(program, teacher=teacher, trainset=attempted[:max_attempts])
    shown = {demo.get("question") for predictor in compiled.predictors() for demo in predictor.demos}
    rest = [example for example in trainset if example.question not in shown]
    labeled = _labeled(program, rest, shots=shots, docs_per_demo=docs_per_demo, seed=seed)
    for mine, extra in zip(compiled.predictors(), labeled.predictors(), strict=True):
        mine.demos = list(mine.demos) + extra.demos[: max(0, shots - len(mine.demos))]
    return compiled


def _random_search(
    program: Method,
    trainset: list,
    *,
    metric: Metric,
    shots: int,
    valset: list | None,
    num_candidates: int,
    teacher_settings: dict,
    threads: int = 1,
    **_: Any,
) -> Method:
    teleprompter = dspy.BootstrapFewShotWithRandomSearch(
        metric=metric,
        teacher_settings=teacher_settings,
        max_bootstrapped_demos=shots,
        max_labeled_demos=0,
        num_candidate_programs=num_candidates,
        num_threads=threads,
    )
    return teleprompter.compile(program, trainset=trainset, valset=valset)


def _mipro(
    program: Method,
    trainset: list,
    *,
    metric: Metric,
    shots: int,
    seed: int,
    valset: list | None,
    teacher_settings: dict,
    threads: int = 1,
    **_: Any,
) -> Method:
    if importlib.util.find_spec("optuna") is None:  # checked first: DSPy needs it only after proposing instructions
        raise ImportError("the mipro optimizer needs optuna, an optional dependency of DSPy: pip install 'optuna>=3.4'")
    teleprompter = dspy.MIPROv2(
        metric=metric,
        auto="light",
        max_bootstrapped_demos=shots,
        max_labeled_demos=0,
        num_threads=threads,
        seed=seed,
        verbose=False,
        teacher_settings=teacher_settings,
    )
    return teleprompter.compile(program, trainset=trainset, valset=valset)


def _gepa(
    program: Method,
    trainset: list,
    *,
    metric: Metric,
    seed: int,
    valset: list | None,
    teacher_settings: dict,
    raw_metric: Metric,
    reflection_lm: dspy.LM | None = None,
    budget: str | None = None,
    threads: int = 1,
    **_: Any,
) -> Method:
    from ragscale.optimizers.feedback import with_feedback

    reflection_lm = reflection_lm or teacher_settings.get("lm") or dspy.settings.lm
    budget = budget or "light"
    limit = {"auto": budget} if budget in GEPA_BUDGETS else {"max_metric_calls": int(budget)}
    teleprompter = dspy.GEPA(  # the score is the metric's; the skipped step is told in the feedback, not scored 0
        metric=with_feedback(raw_metric, program), reflection_lm=reflection_lm, seed=seed, num_threads=threads,
        track_stats=True, **limit,
    )  # fmt: skip
    compiled = teleprompter.compile(program, trainset=trainset, valset=valset or trainset)
    used = getattr(getattr(compiled, "detailed_results", None), "total_metric_calls", None)
    logger.info("GEPA used %s metric calls (budget %s)", used, budget)
    return compiled


GEPA_BUDGETS = ("light", "medium", "heavy")
"""GEPA's ``auto`` budgets; an integer budget caps its metric calls instead."""

OPTIMIZERS: dict[str, Callable[..., dspy.Module]] = {
    "none": _none,
    "labeled": _labeled,
    "bootstrap": _bootstrap,
    "random-search": _random_search,
    "mipro": _mipro,
    "gepa": _gepa,
}

TEACHER_OPTIMIZERS = ("bootstrap", "random-search", "mipro", "gepa")
"""The teleprompters that take a teacher LM: the bootstrap family runs its teacher program on it, GEPA reflects
with it when no reflection LM is given."""


def compile_program(
    program: Method,
    trainset: Sequence[dspy.Example],
    *,
    optimizer: str,
    metric: Metric,
    shots: int,
    docs_per_demo: int,
    lm: dspy.LM | None = None,
    adapter: dspy.Adapter | None = None,
    seed: int = 0,
    valset: Sequence[dspy.Example] | None = None,
    num_candidates: int = 4,
    max_attempts: int | None = None,
    threads: int = 1,
    teacher_lm: dspy.LM | None = None,
    reflection_lm: dspy.LM | None = None,
    budget: str | None = None,
) -> Method:
    """Compile ``program`` on ``trainset`` with the teleprompter named ``optimizer`` and return a new program.

        ``metric(example, pred, trace=None)`` judges bootstrapped traces and candidates (``ragscale.optimizers
        .metrics.em_metric`` or ``f1_metric``); ``lm`` and ``adapter``, when given, are used while compiling
        (otherwise ``dspy.settings``). ``valset`` scores candidates for random-search and mipro (default: the
        trainset, resp. a split of it); each costs one program run per example and candidate, so keep it small on a
        CPU. ``max_attempts`` caps the training examples ``bootstrap`` runs the program on (default: all of them,
        until ``shots`` traces pass); ``threads`` is how many program runs a teleprompter makes at once (bootstrap's
    training examples, random-search's and mipro's candidate scoring, GEPA's evaluations). ``teacher_lm``
        runs the bootstrap family's teacher copy of the program (the student's demonstrations are its traces); the
        other teleprompters do not run a teacher and refuse one. ``reflection_lm`` and ``budget`` are GEPA's (see the
        module docstring). The input ``program`` is not changed.
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; valid choices: {', '.join(OPTIMIZERS)}")
    if shots < 0 or docs_per_demo < 0:
        raise ValueError(f"shots ({shots}) and docs_per_demo ({docs_per_demo}) must be >= 0")
    if teacher_lm is not None and optimizer not in TEACHER_OPTIMIZERS:
        raise ValueError(
            f"optimizer {optimizer!r} runs no teacher; a teacher LM needs one of: {', '.join(TEACHER_OPTIMIZERS)}"
        )
    settings = {name: value for name, value in (("lm", lm), ("adapter", adapter)) if value is not None}
    logger.info("compiling %s with %s on %d examples", type(program).__name__, optimizer, len(trainset))
    with dspy.context(**settings):
        compiled = OPTIMIZERS[optimizer](
            program,
            list(trainset),
            metric=keeping_behaviour(metric, program),
            raw_metric=metric,
            shots=shots,
            docs_per_demo=docs_per_demo,
            seed=seed,
            teacher_settings={"lm": teacher_lm} if teacher_lm is not None else {},
            valset=list(valset) if valset is not None else None,
            num_candidates=num_candidates,
            max_attempts=max_attempts,
            threads=threads,
            reflection_lm=reflection_lm,
            budget=budget,
        )
    return cap_demos(compiled, shots, docs_per_demo)
