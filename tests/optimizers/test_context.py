"""The context-window check: each predictor longest prompt, its documents and demonstrations counted."""

import pytest
from doubles import FixedRetriever, examples
from dspy.utils import DummyLM

from ragscale.optimizers.context import ContextWindowError, check_fits_context
from ragscale.optimizers.metrics import em_metric
from ragscale.optimizers.teleprompters import compile_program
from ragscale.programs import DRAG, RAG, IterDRAG


def words(text: str) -> int:
    return len(text.split())


def test_context_check_names_the_predictor_the_estimate_and_the_window():
    lm = DummyLM([])  # reserves its max_tokens, 1000, for the answer
    long_document = "Title: " + "word " * 500
    with pytest.raises(ContextWindowError, match=r"DRAG\.answer: .* estimated at \d+ tokens .* 2000 tokens"):
        check_fits_context(
            DRAG(FixedRetriever(), k=5),
            lm,
            question="Where?",
            document=long_document,
            count_tokens=words,
            context_window=2000,
        )


def test_context_check_counts_demos_and_iterdrag_gathered_documents():
    program = IterDRAG(FixedRetriever(), k=2, max_iterations=3)
    estimates = check_fits_context(
        program, None, question="Where?", document="Title: " + "word " * 100, count_tokens=words, context_window=10_000
    )
    assert estimates["synthesize"] > estimates["answer_sub"] + 3 * 2 * 100
    compiled = compile_program(program, examples(), optimizer="labeled", metric=em_metric, docs_per_demo=5, shots=2)
    with_demos = check_fits_context(
        compiled, None, question="Where?", document="Title: " + "word " * 100, count_tokens=words, context_window=10_000
    )
    assert with_demos["synthesize"] > estimates["synthesize"]


def test_context_check_before_compiling_counts_stand_in_demos_with_their_documents():
    def estimate(program, **demos):
        document = "Title: " + "word " * 100
        return check_fits_context(
            program, None, question="Where?", document=document, count_tokens=words, context_window=10_000, **demos
        )

    bare = estimate(DRAG(FixedRetriever(), k=2))
    planned = estimate(DRAG(FixedRetriever(), k=2), shots=3, docs_per_demo=2)
    without_documents = estimate(RAG(FixedRetriever(), k=2), shots=3, docs_per_demo=2)
    assert planned["answer"] > bare["answer"] + 3 * 2 * 100
    assert bare["answer"] < without_documents["answer"] < bare["answer"] + 3 * 100


def test_many_documents_are_judged_by_the_mean_length_of_k_passages_one_by_its_95th_percentile():
    from statistics import fmean

    from ragscale.optimizers.context import typical_document

    passages = [{"title": "T", "text": "w" * n} for n in [*range(100, 1100, 10), 5000, 6000, 7000]]
    one, many = typical_document(passages, 1), typical_document(passages, 200)
    lengths = sorted(len(f"T: {p['text']}") for p in passages)
    assert len(one) == lengths[round(0.95 * (len(lengths) - 1))]
    assert fmean(lengths) <= len(many) < len(one)
    assert len(typical_document(passages, 5)) > len(many)  # fewer passages, more room for a long one
