"""Will the prompt fit? The longest prompt each predictor of a program can be sent, against the LM's window.

``check_fits_context`` formats each predictor's prompt with stand-in inputs as long as the data's longest question
and a long document, as many documents as the program says the predictor can see (``max_documents()``), and
the demonstrations it has (or, before compiling, stand-in ones), counts it with the LM's tokenizer
(``prompt_tokens``) and raises ``ContextWindowError`` when it and the answer's ``max_tokens`` cannot fit. A prompt
far over the window is refused from an estimate (``linear_estimate``) without being built, so no k or demonstration
count makes the check itself use unbounded memory. ``fits_context`` takes those stand-ins from a run's examples;
``overlong`` finds the questions whose own text makes the prompt too long, each one's error naming it.
"""

import logging
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from statistics import NormalDist, fmean, pstdev
from typing import Any

import dspy

from ragscale.programs.base import Method
from ragscale.programs.lm.coerce import is_list
from ragscale.programs.lm.prompt import context_window as window_of
from ragscale.programs.lm.prompt import prompt_tokens
from ragscale.programs.retrieval import Passage, format_passage

logger = logging.getLogger(__name__)


class ContextWindowError(ValueError):
    """A predictor's longest prompt does not fit the LM's context window: ``tokens`` estimated, ``reserve`` kept for
    the answer, ``window`` the LM's."""

    def __init__(self, message: str, *, tokens: int = 0, reserve: int = 0, window: int = 0) -> None:
        super().__init__(message)
        self.tokens, self.reserve, self.window = tokens, reserve, window


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
        elif is_list(field.annotation):
            inputs[name] = [f"Q: {question} A: {question}"] * n_follow_ups
        else:
            inputs[name] = document if name in ("document", "passage") else question
    return inputs


def _longest_prompt_tokens(
    predictor: dspy.Predict,
    lm: dspy.BaseLM | None,
    adapter: dspy.Adapter,
    count_tokens: Callable[[str], int] | None,
    question: str,
    document: str,
    documents: int,
    follow_ups: int,
    stand_ins: int,
    demo_documents: int,
) -> int:
    """Tokens of ``predictor``'s prompt with stand-in inputs (``longest_inputs``) of ``documents`` documents and
    ``follow_ups`` follow-ups, after its own demonstrations and ``stand_ins`` stand-in ones of ``demo_documents``
    documents each (the question as every output)."""
    signature = predictor.signature
    inputs = longest_inputs(signature, documents, question, document, follow_ups)
    stand_in = longest_inputs(signature, demo_documents, question, document, follow_ups)
    stand_in.update(dict.fromkeys(signature.output_fields, question))
    demos = list(predictor.demos) + [stand_in] * stand_ins
    return prompt_tokens(lm, adapter.format(signature, demos, inputs), count_tokens)


def linear_estimate(
    tokens: Callable[[int, int, int, int], int], documents: int, follow_ups: int, stand_ins: int, demo_documents: int
) -> int:
    """The tokens of a prompt with these counts, extrapolated from prompts of at most one of each.

    ``tokens(documents, follow_ups, stand_ins, demo_documents)`` formats and counts one prompt. A prompt grows
    linearly in each count (every document, follow-up and stand-in demonstration adds its own text), so the cost of
    one of each, measured on prompts of at most two entries, times the counts estimates the whole without building
    it: k = 1,000,000 would otherwise format and tokenise a million documents.
    """
    base = tokens(0, 0, 0, 0)
    per_document = tokens(1, 0, 0, 0) - base
    per_follow_up = tokens(0, 1, 0, 0) - base
    one_demo = tokens(0, 0, 1, 0)
    per_demo = one_demo - base
    per_demo_document = tokens(0, 0, 1, 1) - one_demo
    per_stand_in = per_demo + demo_documents * per_demo_document + follow_ups * per_follow_up
    return base + documents * per_document + follow_ups * per_follow_up + stand_ins * per_stand_in


def check_fits_context(
    program: Method,
    lm: dspy.BaseLM | None,
    *,
    question: str,
    document: str,
    count_tokens: Callable[[str], int] | None = None,
    context_window: int | None = None,
    adapter: dspy.Adapter | None = None,
    shots: int = 0,
    docs_per_demo: int = 0,
) -> dict[str, int]:
    """Estimate each predictor's longest prompt and raise ``ContextWindowError`` if one does not fit.

    The prompt is formatted by the adapter (``adapter``, else ``dspy.settings.adapter``, else ChatAdapter) with
    the predictor's demonstrations as they are and stand-in inputs (``longest_inputs``): pass the longest
    question and a long formatted document (``format_passage``) of the data. A predictor sees
    ``program.max_documents()[name]`` documents; list inputs such as follow-ups get ``program.max_list_items()``
    entries. Tokens are counted by ``prompt_tokens(lm, messages)`` (the LM's chat template and tokenizer), or by
    ``count_tokens`` per message plus its markup when given; the LM's ``max_tokens`` is reserved for the answer.
    The window defaults to ``context_window(lm)``. Returns ``{predictor name: estimated prompt tokens}``.

    Before compiling, pass ``shots`` and ``docs_per_demo``: predictors with fewer demonstrations are
    filled with stand-in ones (the same stand-in inputs with ``docs_per_demo`` documents, unless the program
    drops demo documents, and the question as every output).

    The prompt is first estimated from prompts of one document, follow-up and demonstration (``linear_estimate``);
    only when that is under twice the window is the whole prompt formatted and counted, so the memory this check
    uses is bounded by the window whatever k, iterations or demonstrations a config asks for, and a prompt near the
    window is judged by its exact count.
    """
    if context_window is None:
        context_window = window_of(lm)
    kwargs: Mapping[str, Any] = getattr(lm, "kwargs", None) or {}
    reserve = int(kwargs.get("max_tokens") or 0)
    adapter = adapter or dspy.settings.adapter or dspy.ChatAdapter()
    documents = program.max_documents()
    demo_documents = docs_per_demo if program.demo_documents else 0
    follow_ups = program.max_list_items()
    estimates: dict[str, int] = {}
    for name, predictor in program.named_predictors():
        tokens = partial(_longest_prompt_tokens, predictor, lm, adapter, count_tokens, question, document)
        sizes = (documents.get(name, 0), follow_ups, max(0, shots - len(predictor.demos)), demo_documents)
        estimates[name] = linear_estimate(tokens, *sizes)
        if estimates[name] + reserve <= 2 * context_window:  # small enough to format: count the real prompt
            estimates[name] = tokens(*sizes)
        if estimates[name] + reserve > context_window:
            raise ContextWindowError(
                f"{type(program).__name__}.{name}: the longest prompt is estimated at {estimates[name]} tokens "
                f"(+ {reserve} reserved for the answer), over the context window of {context_window} tokens of "
                f"{getattr(lm, 'model', 'the LM')}; lower --docs, --shots or --docs-per-demo",
                tokens=estimates[name], reserve=reserve, window=context_window,
            )  # fmt: skip
    return estimates


def fits_context(
    program, lm, adapter, examples: Sequence, *, percentile: float = 95.0, passages: Sequence[Mapping] | None = None,
    question: str | None = None,
) -> dict[str, int]:  # fmt: skip
    """``check_fits_context`` with ``question`` (default: the longest question of ``examples``) and, for every
    document slot, a passage of the length that k passages reach on average at the ``percentile``-th percentile
    (``typical_document``), k being the most documents a predictor of ``program`` sees; raises
    ``ContextWindowError`` (a ValueError naming the predictor and the counts) when that prompt cannot fit. The
    passages are ``passages`` (the corpus searched), else the paragraphs of ``examples``.

    Not the longest paragraph: a dataset's longest paragraph can be many times its median, and k copies of it
    would reject configurations whose real prompts fit. The engine refuses a prompt over the window, so a rare
    question that still overflows is recorded as failed and the run goes on.
    """
    if question is None:
        question = max((ex.question for ex in examples), key=len, default="")
    document = _document(program, examples, passages, percentile)
    estimates = check_fits_context(program, lm, question=question, document=document, adapter=adapter)
    logger.info("prompt estimates (tokens, %s documents at the p%g length of their mean): %s",
                max(program.max_documents().values(), default=1), percentile, estimates)  # fmt: skip
    return estimates


def overlong(
    program, lm, adapter, examples: Sequence, *, percentile: float = 95.0, passages: Sequence[Mapping] | None = None
) -> dict[str, ContextWindowError]:
    """The examples whose own question makes ``program``'s longest prompt (``fits_context``'s, built around that
    question) too long for the LM's window, by id, each with its error: "question <id>: its prompt is N tokens
    (+ R for the answer), the model's window is W". The longest questions are checked first, until one fits: a
    shorter question gives a shorter prompt (one that slips past by a token is refused by the engine when asked)."""
    document = _document(program, examples, passages, percentile)
    refused: dict[str, ContextWindowError] = {}
    for example in sorted(examples, key=lambda ex: len(ex.question), reverse=True):
        try:
            check_fits_context(program, lm, question=example.question, document=document, adapter=adapter)
        except ContextWindowError as exc:
            refused[str(example.id)] = ContextWindowError(
                f"question {example.id}: its prompt is {exc.tokens:,} tokens (+ {exc.reserve:,} for the answer), the "
                f"model's window is {exc.window:,}", tokens=exc.tokens, reserve=exc.reserve, window=exc.window,
            )  # fmt: skip
            continue
        break
    return refused


def _document(program, examples: Sequence, passages: Sequence[Mapping] | None, percentile: float) -> str:
    """``typical_document`` of ``passages``, else of the paragraphs of ``examples``, for the most documents a
    predictor of ``program`` sees."""
    if passages is None:
        passages = [p for ex in examples for p in (getattr(ex, "paragraphs", None) or [])]
    return typical_document(passages, max(program.max_documents().values(), default=1), percentile)


def typical_document(passages: Sequence[Mapping], k: int, percentile: float = 95.0) -> str:
    """A formatted passage whose length stands for one of ``k`` passages retrieved together: the shortest passage at
    least as long as the ``percentile``-th percentile of the mean length of ``k`` passages (the mean length plus
    z standard deviations over the square root of k, a normal approximation of the mean of k draws), and never
    longer than the ``percentile``-th percentile of one passage's length. One passage (k = 1) is judged by that
    percentile itself; 200 passages are judged by about their mean, which is what their sum comes to."""
    documents = sorted((format_passage(Passage(id="", title=p["title"], text=p["text"])) for p in passages), key=len)
    if not documents:
        return ""
    single = documents[round(percentile / 100 * (len(documents) - 1))]
    lengths = [len(d) for d in documents]
    z = NormalDist().inv_cdf(percentile / 100)
    target = fmean(lengths) + z * pstdev(lengths) / max(1, k) ** 0.5
    if k <= 1 or target >= len(single):
        return single
    return next(d for d in documents if len(d) >= target)
