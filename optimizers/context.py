"""Will the prompt fit? The longest prompt each predictor of a program can be sent, against the LM's window.

``check_fits_context`` formats each predictor's prompt with stand-in inputs as long as the data's longest question
and a long document, as many documents as the program says the predictor can see (``max_documents()``), and
the demonstrations it has (or, before compiling, stand-in ones), counts it with the LM's tokenizer
(``prompt_tokens``) and raises ``ContextWindowError`` when it and the answer's ``max_tokens`` cannot fit.
``fits_context`` takes those stand-ins from a run's examples.
"""

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import dspy

from ragscale.programs.lm.coerce import is_list
from ragscale.programs.lm.prompt import context_window as window_of
from ragscale.programs.lm.prompt import prompt_tokens
from ragscale.programs.retrieval import Passage, format_passage

logger = logging.getLogger(__name__)


class ContextWindowError(ValueError):
    """A predictor's longest prompt does not fit the LM's context window."""


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
    question and a long formatted document (``format_passage``) of the data. A predictor sees
    ``program.max_documents()[name]`` documents; list inputs such as follow-ups get ``program.max_iterations``
    entries. Tokens are counted by ``prompt_tokens(lm, messages)`` (the LM's chat template and tokenizer), or by
    ``count_tokens`` per message plus its markup when given; the LM's ``max_tokens`` is reserved for the answer.
    The window defaults to ``context_window(lm)``. Returns ``{predictor name: estimated prompt tokens}``.

    Before compiling, pass ``max_demos`` and ``max_docs_per_demo``: predictors with fewer demonstrations are
    filled with stand-in ones (the same stand-in inputs with ``max_docs_per_demo`` documents, unless the program
    drops demo documents, and the question as every output).
    """
    if context_window is None:
        context_window = window_of(lm)
    kwargs: Mapping[str, Any] = getattr(lm, "kwargs", None) or {}
    reserve = int(kwargs.get("max_tokens") or 0)
    adapter = adapter or dspy.settings.adapter or dspy.ChatAdapter()
    documents = program.max_documents()
    demo_documents = max_docs_per_demo if getattr(program, "demo_documents", True) else 0
    follow_ups = getattr(program, "max_iterations", 1)
    estimates: dict[str, int] = {}
    for name, predictor in program.named_predictors():
        signature = predictor.signature
        inputs = longest_inputs(signature, documents.get(name, 0), question, document, follow_ups)
        stand_in = longest_inputs(signature, demo_documents, question, document, follow_ups)
        stand_in.update(dict.fromkeys(signature.output_fields, question))
        demos = list(predictor.demos) + [stand_in] * max(0, max_demos - len(predictor.demos))
        messages = adapter.format(signature, demos, inputs)
        estimates[name] = prompt_tokens(lm, messages, count_tokens)
        if estimates[name] + reserve > context_window:
            raise ContextWindowError(
                f"{type(program).__name__}.{name}: the longest prompt is estimated at {estimates[name]} tokens "
                f"(+ {reserve} reserved for the answer), over the context window of {context_window} tokens of "
                f"{getattr(lm, 'model', 'the LM')}; lower k, max_demos or max_docs_per_demo"
            )
    return estimates


def fits_context(program, lm, adapter, examples: Sequence, *, percentile: float = 95.0) -> dict[str, int]:
    """``check_fits_context`` with the longest question of ``examples`` and, for every document slot, a paragraph of
    the ``percentile``-th length of their paragraphs; raises ``ContextWindowError`` (a ValueError naming the
    predictor and the counts) when that prompt cannot fit.

    Not the longest paragraph: a dataset's longest paragraph can be many times its median, and k copies of it
    would reject configurations whose real prompts fit. The engine refuses a prompt over the window, so a rare
    question that still overflows is recorded as failed and the run goes on.
    """
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
    logger.info("prompt estimates (tokens, documents at the p%g length): %s", percentile, estimates)
    return estimates
