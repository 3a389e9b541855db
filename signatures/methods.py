"""Prompts of the query-transformation, multi-step and self-reflective methods.

Each docstring is the instruction the model reads (``instructions.short_answer`` where it asks for the final
answer); no logic lives here. Signatures shared with RAG, DRAG and IterDRAG (``Answer``, ``AnswerSub``,
``Synthesize``, ``Grade``, ``StepBack``, ``Hypothesize``) are in ``qa.py``.
"""

from typing import Literal

import dspy

from ragscale.signatures.instructions import short_answer


class Rephrase(dspy.Signature):
    """Write different versions of the question as search queries, each looking at it from another angle,
    so that together they find documents a single search would miss. Keep every fact of the question."""

    question: str = dspy.InputField()
    n: int = dspy.InputField(desc="how many queries to write")
    queries: list[str] = dspy.OutputField(desc="n short search queries")


class ListSubQuestions(dspy.Signature):
    """Break the question into the simpler sub-questions that must be answered first, in the order they
    must be answered. Each sub-question asks for one fact; a later one may depend on an earlier answer."""

    question: str = dspy.InputField()
    sub_questions: list[str] = dspy.OutputField(desc="two to four simple questions, in order")


class AnswerInOrder(dspy.Signature):
    __doc__ = short_answer(
        "Answer the question using the documents and the questions already answered before it.", width=100
    )

    documents: list[str] = dspy.InputField(desc="retrieved passages, the most relevant last")
    answered: list[str] = dspy.InputField(desc="earlier questions, each with its answer")
    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc="a few words at most")


class ContinueReasoning(dspy.Signature):
    """Write the next sentence of step-by-step reasoning towards the answer, using the documents. Write one
    sentence stating one fact. When you can answer, write a sentence that starts with "So the answer is"."""

    documents: list[str] = dspy.InputField(desc="passages retrieved so far")
    question: str = dspy.InputField()
    reasoning: list[str] = dspy.InputField(desc="the sentences written so far")
    next_sentence: str = dspy.OutputField(desc="one sentence")


class PlanChain(dspy.Signature):
    """Plan a chain of simple search queries that leads to the answer of the question, each with the answer
    you expect. Write "unknown" as the answer of a step you cannot answer."""

    question: str = dspy.InputField()
    queries: list[str] = dspy.OutputField(desc="the search queries, in order")
    answers: list[str] = dspy.OutputField(desc="the expected answer of each query, same order")


class ReplanChain(dspy.Signature):
    """The first steps of a chain of search queries for the question were checked against documents, and the
    last one corrected. Keep them as they are and plan only the steps after them, each with the answer you
    expect. Write "unknown" as the answer of a step you cannot answer."""

    question: str = dspy.InputField()
    checked: list[str] = dspy.InputField(desc="steps already checked, as 'query -> answer'")
    queries: list[str] = dspy.OutputField(desc="the next search queries, in order")
    answers: list[str] = dspy.OutputField(desc="the expected answer of each query, same order")


class Verify(dspy.Signature):
    """Check the expected answer of a search query against the documents. Say whether the documents support
    it, and give the answer the documents support (the expected one when it is right)."""

    documents: list[str] = dspy.InputField(desc="passages retrieved for the query")
    query: str = dspy.InputField()
    expected_answer: str = dspy.InputField()
    supported: bool = dspy.OutputField(desc="yes if the documents support the expected answer")
    answer: str = dspy.OutputField(desc="the answer the documents support, a few words")


class DraftSteps(dspy.Signature):
    """Think step by step about how to answer the question. Write your reasoning as a list of short steps,
    one fact or inference each."""

    question: str = dspy.InputField()
    steps: list[str] = dspy.OutputField(desc="two to five short reasoning steps")


class WriteQuery(dspy.Signature):
    """Write a search query that finds the facts needed to check the last reasoning step."""

    question: str = dspy.InputField()
    steps: list[str] = dspy.InputField(desc="the reasoning so far; the last step is the one to check")
    query: str = dspy.OutputField(desc="a short search query")


class ReviseStep(dspy.Signature):
    """Correct the reasoning step using the documents: fix wrong facts, fill in missing ones, and keep it
    one short step. Return it unchanged if the documents agree with it."""

    documents: list[str] = dspy.InputField(desc="passages retrieved for this step")
    question: str = dspy.InputField()
    step: str = dspy.InputField()
    revised_step: str = dspy.OutputField()


class AnswerFromReasoning(dspy.Signature):
    __doc__ = short_answer(
        "Answer the question from the reasoning steps, which were checked against the documents.", width=102
    )

    documents: list[str] = dspy.InputField(desc="passages used to check the steps")
    question: str = dspy.InputField()
    reasoning: list[str] = dspy.InputField(desc="the checked reasoning steps")
    answer: str = dspy.OutputField(desc="a few words at most")


class Rewrite(dspy.Signature):
    """The searches tried so far did not find documents that answer the question. Rewrite the question as a
    new search query: name the key entities and facts to look up, in other words than the queries tried."""

    question: str = dspy.InputField()
    tried: list[str] = dspy.InputField(desc="search queries that failed")
    query: str = dspy.OutputField(desc="a short search query")


class DecideRetrieval(dspy.Signature):
    """Decide whether answering the question needs facts looked up in documents. Say no only for questions
    you can answer for certain from common knowledge."""

    question: str = dspy.InputField()
    needs_retrieval: bool = dspy.OutputField()


class CheckSupport(dspy.Signature):
    """Judge whether the documents support the answer to the question: fully if every fact of the answer is
    stated in them, partially if some is, none if they do not support it."""

    documents: list[str] = dspy.InputField()
    question: str = dspy.InputField()
    answer: str = dspy.InputField()
    support: Literal["fully", "partially", "none"] = dspy.OutputField()


class RateUsefulness(dspy.Signature):
    """Rate how useful the answer is for the question, from 1 (does not answer it) to 5 (a complete, direct
    answer)."""

    question: str = dspy.InputField()
    answer: str = dspy.InputField()
    usefulness: int = dspy.OutputField(desc="1 to 5")
