"""Demonstrations that carry their own documents: what the ``labeled`` teleprompter builds and every compiled
program is cut to.

DRAG (Yue et al. 2024, arXiv:2410.04343) shows each demonstration with the documents retrieved for that
demonstration's question. ``labeled_fields`` turns one labeled example into the field values it offers a program's
predictors (matched by field name), ``demo_documents`` retrieves a demonstration's documents with the program's
own retriever, ``select_demos`` picks a predictor's demonstrations from distinct training questions, one each, so
that together they show the method's step (``Method.demo_set_lacks``), ``LabeledWithDocuments`` is DSPy's
LabeledFewShot built on them, ``redraw_demo_documents`` gives a
compiled program's demonstrations their queries' documents at another k, and ``cap_demos`` keeps at most ``shots``
demonstrations per predictor and ``docs_per_demo`` documents per demonstration, the most relevant kept, last
(DRAG's order). A program whose class sets ``demo_documents = False`` (RAG) has its demonstrations'
documents dropped: they become question -> answer pairs.
"""

import itertools
import logging
import random
from collections.abc import Callable, Sequence
from typing import Any

import dspy
from dspy.teleprompt.teleprompt import Teleprompter

from ragscale.optimizers.metrics import gold_answers
from ragscale.programs.base import Method
from ragscale.programs.lm.coerce import is_list
from ragscale.programs.retrieval import format_passage, merge_by_rank, most_relevant_last

logger = logging.getLogger(__name__)

MAX_TRIED = 10_000
"""The most candidate sets ``select_demos`` checks before it settles for the first."""

NO_FOLLOW_UP = "none"
"""What a labeled decomposition step writes when the follow-ups answered so far are enough (IterDRAG stops)."""


def demo_documents(student: Method, query: str, max_docs: int) -> list[str] | None:
    """The documents a demonstration for ``query`` carries: the student's own retrieval (its ``k``), most
    relevant last, the last ``max_docs`` kept; None when the student retrieves nothing or drops demo documents."""
    if not (student.retrieves and student.demo_documents) or student.retriever is None:
        return None
    passages = most_relevant_last(student.retriever(query, student.k))
    return [format_passage(p) for p in passages][max(0, len(passages) - max_docs) :]


def labeled_fields(example: dspy.Example, documents: Callable[[str], list[str] | None]) -> list[dict[str, Any]]:
    """The field values one labeled example offers a program's predictors, matched to them by field name.

    Every example offers (question, documents, follow_ups, answer): the first gold answer, documents retrieved
    for the question, and follow-ups from its decomposition if any, else none -- demonstrations for Answer,
    AnswerClosedBook and Synthesize. An example with a decomposition (MuSiQue's ``question_decomposition``;
    "#1" in a step is replaced by step 1's answer) also offers, per step, a Decompose demonstration (follow-ups
    so far -> that step's question), an AnswerSub one (documents retrieved for the step -> its answer), and a
    last Decompose one saying no follow-up is needed ("none", ``NO_FOLLOW_UP``). Without a decomposition
    IterDRAG's decompose and answer_sub get no labeled demonstrations: only its final synthesize does. A
    relevance-labelled passage (``ragscale.optimizers.graders.grade_examples``: question, document, grade) offers
    itself, a Grade demo.
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
        offered.append(dict(question=example.question, follow_ups=follow_ups[:index], follow_up=sub_question))
        offered.append(dict(sub_question=sub_question, documents=documents(sub_question), answer=sub_answer))
    if steps:
        offered.append(dict(question=example.question, follow_ups=follow_ups, follow_up=NO_FOLLOW_UP))
    return [{name: value for name, value in fields.items() if value is not None} for fields in offered]


def select_demos(
    program: Method, predictor: str, groups: Sequence[tuple[dspy.Example, Sequence[Any]]], shots: int
) -> tuple[list[Any], list[dspy.Example], str | None]:
    """Up to ``shots`` demonstrations of ``predictor``, one call from each of as many distinct training questions
    (``groups``: ``(example, its candidate calls)`` in training order), so that two shots never come from one
    question. Among those sets, the first whose demonstrations together show the method's step
    (``program.demo_set_lacks`` is None) is taken, earlier questions and earlier calls first; when none does (or
    ``MAX_TRIED`` were checked), the first set. Returns (demos, their training examples, what the set lacks)."""
    groups = [(example, list(calls)) for example, calls in groups if calls]
    first: tuple[list, list] = ([], [])
    tried = 0
    for chosen in itertools.combinations(groups, min(shots, len(groups))):
        examples = [example for example, _ in chosen]
        for demos in map(list, itertools.product(*(calls for _, calls in chosen))):
            first = first if tried else (demos, examples)
            if program.demo_set_lacks(predictor, demos, examples) is None:
                return demos, examples, None
            tried += 1
            if tried >= MAX_TRIED:
                return *first, program.demo_set_lacks(predictor, *first)
    return *first, program.demo_set_lacks(predictor, *first)


class LabeledWithDocuments(Teleprompter):
    """LabeledFewShot (``dspy/teleprompt/vanilla.py``) whose demonstrations carry their own documents.

    Samples ``shots`` training examples; each predictor gets one demonstration from each of them whose fields cover
    its signature (``documents`` may be missing: then the demonstration is a question -> answer pair; another list
    input may be missing: then it is shown empty). Of an example that offers several, as a decomposition's steps,
    ``select_demos`` takes those that together show the method's step.
    """

    def __init__(self, shots: int, docs_per_demo: int, seed: int = 0):
        self.shots, self.docs_per_demo, self.seed = shots, docs_per_demo, seed

    def compile(self, student: Method, *, trainset: Sequence[dspy.Example]) -> Method:
        self.student = student.reset_copy()
        examples = random.Random(self.seed).sample(list(trainset), min(self.shots, len(trainset)))

        def documents(query: str) -> list[str] | None:
            return demo_documents(self.student, query, self.docs_per_demo)

        offered = [(example, labeled_fields(example, documents)) for example in examples]
        for name, predictor in self.student.named_predictors():
            signature = predictor.signature
            # a list input the data has no label for (earlier answers, reasoning so far) is shown empty, as in
            # a first call: the final answer of Decomposition (recursive) and RAT is then taught like Synthesize's
            empty = {n: [] for n, f in signature.input_fields.items() if n != "documents" and is_list(f.annotation)}
            needed = set(signature.fields) - {"documents"}
            groups = []
            for example, fields in offered:
                fits = [f for f in ({**empty, **given} for given in fields) if needed <= f.keys()]
                groups.append((example, [dspy.Example({n: f[n] for n in signature.fields if n in f}) for f in fits]))
            predictor.demos, _, lacks = select_demos(self.student, name, groups, self.shots)
            if lacks:
                logger.info("labeled demonstrations of %s.%s: %s", type(self.student).__name__, name, lacks)
        return self.student


def redraw_demo_documents(program: Method, k: int) -> Method:
    """Give every demonstration that carries documents the ones ``program``'s retriever finds at ``k`` for its
    queries (``program.demo_queries``; several merged by best rank), most relevant last, in place: a chain written
    at one k is then shown with the documents its own queries retrieve at another, as a demonstration's documents
    are always its own retrieval (DRAG). Returns ``program``."""
    for name, predictor in program.named_predictors():
        for demo in predictor.demos:
            if "documents" in demo:
                rankings = [program.retriever(query, k) for query in program.demo_queries(name, demo)]
                demo["documents"] = [format_passage(p) for p in most_relevant_last(merge_by_rank(rankings))]
    return program


def cap_demos(program: Method, shots: int, docs_per_demo: int) -> Method:
    """Keep at most ``shots`` demonstrations per predictor and ``docs_per_demo`` documents per
    demonstration (the last ones: most relevant last); drop them all when the program sets ``demo_documents =
    False``. Changes ``program`` in place and returns it."""
    keep_documents = program.demo_documents
    for predictor in program.predictors():
        capped = []
        for demo in predictor.demos[:shots]:
            fields = dict(demo.items()) if isinstance(demo, dspy.Example) else dict(demo)
            if "documents" in fields:
                documents = list(fields.pop("documents"))
                if keep_documents:
                    fields["documents"] = documents[max(0, len(documents) - docs_per_demo) :]
            capped.append(dspy.Example(fields))
        predictor.demos = capped
    return program
