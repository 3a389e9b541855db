"""How a program learns its demonstrations: the teleprompters by name, and a context-window check.

``OPTIMIZERS`` maps the CLI names to compile functions, all called the same way by ``compile_program``:

- ``none``: the program zero-shot (a reset copy).
- ``labeled``: ``LabeledWithDocuments``, DSPy's LabeledFewShot whose demonstrations carry the documents the
  program's own retriever finds for each demonstration's question (Yue et al. 2024, arXiv:2410.04343, DRAG).
- ``bootstrap``: ``dspy.BootstrapFewShot`` (``ThreadedBootstrapFewShot``: the teacher runs on ``threads``
  training examples at a time); demonstrations are the program's own traces that pass the metric,
  so they hold the documents retrieved during the trace. As DSPy's ``max_labeled_demos`` does with raw
  examples, predictors left short of ``max_demos`` are topped up with labeled demonstrations (with documents).
- ``random-search``: ``dspy.BootstrapFewShotWithRandomSearch`` over ``num_candidates`` bootstrapped sets.
- ``mipro``: ``dspy.MIPROv2(auto="light")``: instructions and bootstrapped demonstrations searched together
  (needs ``optuna``).

random-search and mipro score their candidates on ``valset`` before the caps below are applied and are not
topped up with labeled demonstrations: what they pick is what they measured, less any documents over the cap.

After any of them every predictor keeps at most ``max_demos`` demonstrations and every demonstration at most
``max_docs_per_demo`` documents, the most relevant kept, last (DRAG's order). A program whose class sets
``demo_documents = False`` (RAG) has its demonstrations' documents dropped: they become question -> answer pairs.
"""

import importlib.util
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dspy
from dspy.teleprompt.teleprompt import Teleprompter

from ragscale.optimizers.metrics import gold_answers
from ragscale.programs.lm.adapter import is_list
from ragscale.programs.retrieval import format_passage, most_relevant_last

logger = logging.getLogger(__name__)

Metric = Callable[..., float]


class ContextWindowError(ValueError):
    """A predictor's longest prompt does not fit the LM's context window."""


# --- labeled demonstrations -------------------------------------------------------------------------------------


def demo_documents(student: dspy.Module, query: str, max_docs: int) -> list[str] | None:
    """The documents a demonstration for ``query`` carries: the student's own retrieval (its ``k``), most
    relevant last, the last ``max_docs`` kept; None when the student has no retriever or drops demo documents."""
    retriever = getattr(student, "retriever", None)
    if retriever is None or not getattr(student, "demo_documents", True):
        return None
    passages = most_relevant_last(retriever(query, getattr(student, "k", max_docs)))
    return [format_passage(p) for p in passages][max(0, len(passages) - max_docs) :]


def labeled_fields(example: dspy.Example, documents: Callable[[str], list[str] | None]) -> list[dict[str, Any]]:
    """The field values one labeled example offers a program's predictors, matched to them by field name.

    Every example offers (question, documents, follow_ups, answer): the first gold answer, documents retrieved
    for the question, and follow-ups from its decomposition if any, else none -- demonstrations for Answer,
    AnswerClosedBook and Synthesize. An example with a decomposition (MuSiQue's ``question_decomposition``;
    "#1" in a step is replaced by step 1's answer) also offers, per step, a Decompose demonstration (follow-ups
    so far -> that step's question), an AnswerSub one (documents retrieved for the step -> its answer), and a
    last Decompose one saying no follow-up is needed. Without a decomposition IterDRAG's decompose and
    answer_sub get no labeled demonstrations: only its final synthesize does. A relevance-labelled passage
    (``ragscale.optimizers.graders.grade_examples``: question, document, grade) offers itself, a Grade demo.
    """
    if "grade" in example:
        return [dict(question=example.question, document=example.document, grade=example.grade)]
    steps: list[tuple[str, str]] = []
    for step in example.get("decomposition") or []:
        sub_question = step["question"]
        for index, (_, earlier) in enumerate(steps, start=1):
            sub_question = sub_question.replace(f"#{index}", earlier)
        steps.append((sub_question, step["answer"]))
    follow_ups = [f"Q: {q} A: {a}" for q, a in steps]
    answer = gold_answers(example)[0]
    offered = [
        dict(question=example.question, documents=documents(example.question), follow_ups=follow_ups, answer=answer)
    ]
    for index, (sub_question, sub_answer) in enumerate(steps):
        offered.append(
            dict(question=example.question, follow_ups=follow_ups[:index], needs_follow_up=True, follow_up=sub_question)
        )
        offered.append(dict(sub_question=sub_question, documents=documents(sub_question), answer=sub_answer))
    if steps:
        offered.append(dict(question=example.question, follow_ups=follow_ups, needs_follow_up=False, follow_up=""))
    return [{name: value for name, value in fields.items() if value is not None} for fields in offered]


class LabeledWithDocuments(Teleprompter):
    """LabeledFewShot (``dspy/teleprompt/vanilla.py``) whose demonstrations carry their own documents.

    Samples ``k`` training examples; each predictor gets, up to ``k``, the demonstrations whose fields cover its
    signature (``documents`` may be missing: then the demonstration is a question -> answer pair; another list
    input may be missing: then it is shown empty).
    """

    def __init__(self, k: int = 4, max_docs_per_demo: int = 5, seed: int = 0):
        self.k, self.max_docs_per_demo, self.seed = k, max_docs_per_demo, seed

    def compile(self, student: dspy.Module, *, trainset: Sequence[dspy.Example]) -> dspy.Module:
        self.student = student.reset_copy()
        examples = random.Random(self.seed).sample(list(trainset), min(self.k, len(trainset)))

        def documents(query: str) -> list[str] | None:
            return demo_documents(self.student, query, self.max_docs_per_demo)

        offered = [fields for example in examples for fields in labeled_fields(example, documents)]
        for predictor in self.student.predictors():
            signature = predictor.signature
            # a list input the data has no label for (earlier answers, reasoning so far) is shown empty, as in
            # a first call: the final answer of Decomposition (recursive) and RAT is then taught like Synthesize's
            empty = {n: [] for n, f in signature.input_fields.items() if n != "documents" and is_list(f.annotation)}
            needed = set(signature.fields) - {"documents"}
            candidates = [{**empty, **fields} for fields in offered]
            fits = [fields for fields in candidates if needed <= fields.keys()]
            predictor.demos = [dspy.Example({n: f[n] for n in signature.fields if n in f}) for f in fits]
            predictor.demos = predictor.demos[: self.k]
        return self.student


class ThreadedBootstrapFewShot(dspy.BootstrapFewShot):
    """``dspy.BootstrapFewShot`` that runs the teacher on ``threads`` training examples at a time.

    DSPy's loop runs one example after another, so a local engine never gets a batch to work on. Here each
    group of ``threads`` examples runs at once (the callers' DSPy settings carried into the workers) and the
    traces are kept in training order, stopping at ``max_bootstrapped_demos``: with a deterministic LM these are
    the demonstrations the sequential loop keeps. A group may run up to ``threads - 1`` examples past the last
    one needed.
    """

    def __init__(self, *args: Any, threads: int = 1, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.threads = max(1, threads)

    def _bootstrap(self, *, max_bootstraps: int | None = None) -> None:
        import contextvars
        import copy
        from concurrent.futures import ThreadPoolExecutor

        max_bootstraps = max_bootstraps or self.max_bootstrapped_demos
        self.name2traces = {name: [] for name in self.name2predictor}
        bootstrapped: set[int] = set()

        def attempt(example: dspy.Example) -> dict[str, list] | None:
            """The traces of ``example``'s first passing round, or None."""
            for round_idx in range(self.max_rounds):
                scratch = copy.copy(self)  # shares teacher, metric and error count; its own traces
                scratch.name2traces = {name: [] for name in self.name2predictor}
                if scratch._bootstrap_one_example(example, round_idx):
                    return scratch.name2traces
            return None

        with ThreadPoolExecutor(self.threads) as pool:
            for start in range(0, len(self.trainset), self.threads):
                if len(bootstrapped) >= max_bootstraps:
                    break
                group = enumerate(self.trainset[start : start + self.threads], start)
                runs = [(i, pool.submit(contextvars.copy_context().run, attempt, ex)) for i, ex in group]
                for index, run in runs:
                    traces = run.result()
                    if traces is not None and len(bootstrapped) < max_bootstraps:
                        bootstrapped.add(index)
                        for name, demos in traces.items():
                            self.name2traces[name].extend(demos)
        logger.info("bootstrapped %d traces from %d training examples", len(bootstrapped), len(self.trainset))
        self.validation = [x for i, x in enumerate(self.trainset) if i not in bootstrapped]
        random.Random(0).shuffle(self.validation)


# --- the registry -----------------------------------------------------------------------------------------------


def _none(program: dspy.Module, trainset: list, **_: Any) -> dspy.Module:
    return program.reset_copy()


def _labeled(
    program: dspy.Module, trainset: list, *, max_demos: int, max_docs_per_demo: int, seed: int, **_: Any
) -> dspy.Module:
    return LabeledWithDocuments(max_demos, max_docs_per_demo, seed).compile(program, trainset=trainset)


def _bootstrap(
    program: dspy.Module,
    trainset: list,
    *,
    metric: Metric,
    max_demos: int,
    max_docs_per_demo: int,
    seed: int,
    max_attempts: int | None,
    threads: int = 1,
    **_: Any,
) -> dspy.Module:
    trainset = random.Random(seed).sample(trainset, len(trainset))
    teleprompter = ThreadedBootstrapFewShot(
        metric=metric, max_bootstrapped_demos=max_demos, max_labeled_demos=0, threads=threads
    )
    compiled = teleprompter.compile(program, trainset=trainset[:max_attempts])
    shown = {demo.get("question") for predictor in compiled.predictors() for demo in predictor.demos}
    rest = [example for example in trainset if example.question not in shown]
    labeled = _labeled(program, rest, max_demos=max_demos, max_docs_per_demo=max_docs_per_demo, seed=seed)
    for mine, extra in zip(compiled.predictors(), labeled.predictors(), strict=True):
        mine.demos = list(mine.demos) + extra.demos[: max(0, max_demos - len(mine.demos))]
    return compiled


def _random_search(
    program: dspy.Module,
    trainset: list,
    *,
    metric: Metric,
    max_demos: int,
    valset: list | None,
    num_candidates: int,
    **_: Any,
) -> dspy.Module:
    teleprompter = dspy.BootstrapFewShotWithRandomSearch(
        metric=metric,
        max_bootstrapped_demos=max_demos,
        max_labeled_demos=0,
        num_candidate_programs=num_candidates,
        num_threads=1,
    )
    return teleprompter.compile(program, trainset=trainset, valset=valset)


def _mipro(
    program: dspy.Module, trainset: list, *, metric: Metric, max_demos: int, seed: int, valset: list | None, **_: Any
) -> dspy.Module:
    if importlib.util.find_spec("optuna") is None:  # checked first: DSPy needs it only after proposing instructions
        raise ImportError("the mipro optimizer needs optuna, an optional dependency of DSPy: pip install 'optuna>=3.4'")
    teleprompter = dspy.MIPROv2(
        metric=metric,
        auto="light",
        max_bootstrapped_demos=max_demos,
        max_labeled_demos=0,
        num_threads=1,
        seed=seed,
        verbose=False,
    )
    return teleprompter.compile(program, trainset=trainset, valset=valset)


OPTIMIZERS: dict[str, Callable[..., dspy.Module]] = {
    "none": _none,
    "labeled": _labeled,
    "bootstrap": _bootstrap,
    "random-search": _random_search,
    "mipro": _mipro,
}


def cap_demos(program: dspy.Module, max_demos: int, max_docs_per_demo: int) -> dspy.Module:
    """Keep at most ``max_demos`` demonstrations per predictor and ``max_docs_per_demo`` documents per
    demonstration (the last ones: most relevant last); drop them all when the program sets ``demo_documents =
    False``. Changes ``program`` in place and returns it."""
    keep_documents = getattr(program, "demo_documents", True)
    for predictor in program.predictors():
        capped = []
        for demo in predictor.demos[:max_demos]:
            fields = dict(demo.items()) if isinstance(demo, dspy.Example) else dict(demo)
            if "documents" in fields:
                documents = list(fields.pop("documents"))
                if keep_documents:
                    fields["documents"] = documents[max(0, len(documents) - max_docs_per_demo) :]
            capped.append(dspy.Example(fields))
        predictor.demos = capped
    return program


def compile_program(
    program: dspy.Module,
    trainset: Sequence[dspy.Example],
    *,
    optimizer: str,
    metric: Metric,
    max_demos: int = 4,
    max_docs_per_demo: int = 5,
    lm: dspy.LM | None = None,
    adapter: dspy.Adapter | None = None,
    seed: int = 0,
    valset: Sequence[dspy.Example] | None = None,
    num_candidates: int = 4,
    max_attempts: int | None = None,
    threads: int = 1,
) -> dspy.Module:
    """Compile ``program`` on ``trainset`` with the teleprompter named ``optimizer`` and return a new program.

    ``metric(example, pred, trace=None)`` judges bootstrapped traces and candidates (``ragscale.optimizers
    .metrics.em_metric`` or ``f1_metric``); ``lm`` and ``adapter``, when given, are used while compiling
    (otherwise ``dspy.settings``). ``valset`` scores candidates for random-search and mipro (default: the
    trainset, resp. a split of it); each costs one program run per example and candidate, so keep it small on a
    CPU. ``max_attempts`` caps the training examples ``bootstrap`` runs the program on (default: all of them,
    until ``max_demos`` traces pass); ``threads`` is how many of them ``bootstrap`` runs at once. The input
    ``program`` is not changed.
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; valid choices: {', '.join(OPTIMIZERS)}")
    if max_demos < 0 or max_docs_per_demo < 0:
        raise ValueError(f"max_demos ({max_demos}) and max_docs_per_demo ({max_docs_per_demo}) must be >= 0")
    settings = {name: value for name, value in (("lm", lm), ("adapter", adapter)) if value is not None}
    logger.info("compiling %s with %s on %d examples", type(program).__name__, optimizer, len(trainset))
    with dspy.context(**settings):
        compiled = OPTIMIZERS[optimizer](
            program,
            list(trainset),
            metric=metric,
            max_demos=max_demos,
            max_docs_per_demo=max_docs_per_demo,
            seed=seed,
            valset=list(valset) if valset is not None else None,
            num_candidates=num_candidates,
            max_attempts=max_attempts,
            threads=threads,
        )
    return cap_demos(compiled, max_demos, max_docs_per_demo)


# --- will the prompt fit? ---------------------------------------------------------------------------------------


def longest_inputs(
    signature: type[dspy.Signature], n_documents: int, question: str, document: str, n_follow_ups: int
) -> dict[str, Any]:
    """Stand-in inputs for the longest call of a predictor: ``n_documents`` copies of ``document`` for
    ``documents``, ``n_follow_ups`` follow-ups made of ``question`` for other list inputs, ``document`` for a
    ``document``/``passage`` field, ``question`` for any other text input."""
    inputs: dict[str, Any] = {}
    for name, field in signature.input_fields.items():
        if name == "documents":
            inputs[name] = [document] * n_documents
        elif getattr(field.annotation, "__origin__", None) is list:
            inputs[name] = [f"Q: {question} A: {question}"] * n_follow_ups
        else:
            inputs[name] = document if name in ("document", "passage") else question
    return inputs


def check_fits_context(
    program: dspy.Module,
    lm: dspy.BaseLM | None,
    *,
    question: str,
    document: str,
    count_tokens: Callable[[str], int] | None = None,
    context_window: int | None = None,
    adapter: dspy.Adapter | None = None,
    max_demos: int = 0,
    max_docs_per_demo: int = 0,
) -> dict[str, int]:
    """Estimate each predictor's longest prompt and raise ``ContextWindowError`` if one does not fit.

    The prompt is formatted by the adapter (``adapter``, else ``dspy.settings.adapter``, else ChatAdapter) with
    the predictor's demonstrations as they are and stand-in inputs (``longest_inputs``): pass the longest
    question and the longest formatted document (``format_passage``) of the data. A predictor sees
    ``program.max_documents()[name]`` documents when the program defines it (IterDRAG), else ``program.k``;
    list inputs such as follow-ups get ``program.max_iterations`` entries. Tokens are counted by
    ``count_tokens`` (default: ``ragscale.programs.lm.count_tokens(lm, text)``) plus 4 per message for chat
    markup; the LM's ``max_tokens`` is reserved for the answer. The window defaults to
    ``ragscale.programs.lm.context_window(lm)``. Returns ``{predictor name: estimated prompt tokens}``.

    Before compiling, pass ``max_demos`` and ``max_docs_per_demo``: predictors with fewer demonstrations are
    filled with stand-in ones (the same stand-in inputs with ``max_docs_per_demo`` documents, unless the program
    drops demo documents, and the question as every output).
    """
    if count_tokens is None or context_window is None:
        from ragscale.programs import lm as lms

        count_tokens = count_tokens or (lambda text: lms.count_tokens(lm, text))
        context_window = context_window or lms.context_window(lm)
    kwargs: Mapping[str, Any] = getattr(lm, "kwargs", None) or {}
    reserve = int(kwargs.get("max_tokens") or 0)
    adapter = adapter or dspy.settings.adapter or dspy.ChatAdapter()
    documents = program.max_documents() if hasattr(program, "max_documents") else {}
    demo_documents = max_docs_per_demo if getattr(program, "demo_documents", True) else 0
    follow_ups = getattr(program, "max_iterations", 1)
    estimates: dict[str, int] = {}
    for name, predictor in program.named_predictors():
        signature = predictor.signature
        inputs = longest_inputs(
            signature, documents.get(name, getattr(program, "k", 0)), question, document, follow_ups
        )
        stand_in = longest_inputs(signature, demo_documents, question, document, follow_ups)
        stand_in.update(dict.fromkeys(signature.output_fields, question))
        demos = list(predictor.demos) + [stand_in] * max(0, max_demos - len(predictor.demos))
        messages = adapter.format(signature, demos, inputs)
        estimates[name] = sum(count_tokens(str(message["content"])) + 4 for message in messages)
        if estimates[name] + reserve > context_window:
            raise ContextWindowError(
                f"{type(program).__name__}.{name}: the longest prompt is estimated at {estimates[name]} tokens "
                f"(+ {reserve} reserved for the answer), over the context window of {context_window} tokens of "
                f"{getattr(lm, 'model', 'the LM')}; lower k, max_demos or max_docs_per_demo"
            )
    return estimates
