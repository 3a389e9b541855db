"""Graders learned from labels: a passage is relevant to a question when its title is a supporting title.

CRAG and Self-RAG judge each retrieved passage with ``Predict(Grade)``. Compiling the whole method against EM
teaches that predictor only from traces that happened to end in a right answer, so ``compile_graders`` compiles
every Grade predictor of a program on its own task: ``grade_examples`` turns question-answering examples into
(question, document) -> grade examples, one supporting paragraph ("relevant") and one other paragraph
("irrelevant") per question, and the run's teleprompter compiles a fresh ``Predict(Grade)`` on them against
``grade_match``. Its demonstrations (and, from ``mipro``, its instructions) replace those of the program's graders.

The demonstrations are balanced across the labels (``balance_labels``): a small model shown demonstrations of
one label answers that label to every passage, and the teleprompters alone often keep one label only (a sample of
four labelled examples can be all "irrelevant"; a teacher that calls every passage relevant passes the metric only
on the relevant ones). What the teleprompter kept comes first, label by label; a label it kept too few of is
topped up with labelled examples, as bootstrap tops up a predictor it left short.

With ``calibrate``, each grader then learns the prior its new prompt gives on content-free inputs and grades
against it (``ragscale.programs.calibration``). ``ragscale run`` does not ask for it: a content-free passage is
itself irrelevant, so that prior pushes the grades toward "relevant", where a small model already leans.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import dspy

from ragscale.optimizers.teleprompters import compile_with, teleprompter
from ragscale.programs.base import Method
from ragscale.programs.calibration import CalibratedPredict
from ragscale.programs.retrieval import Passage, format_passage
from ragscale.signatures import Grade

if TYPE_CHECKING:
    from ragscale.optimizers.base import Teleprompter

logger = logging.getLogger(__name__)


def grade_examples(examples: Sequence[dspy.Example], *, ids: bool = False) -> list[dspy.Example]:
    """Two labelled passages per example with paragraphs: a supporting one, then (if any) another one. With
    ``ids``, each also carries ``passage_id`` (``<question id>/<title>``), for a benchmark that keeps each grade;
    demonstrations are made without, as they show every field they carry."""
    labelled = []
    for example in examples:
        paragraphs = example.get("paragraphs") or []
        supporting = [p for p in paragraphs if p["is_supporting"]]
        others = [p for p in paragraphs if not p["is_supporting"]]
        for paragraph, grade in ((supporting[:1], "relevant"), (others[:1], "irrelevant")):
            for p in paragraph:
                document = format_passage(Passage(id=p["title"], title=p["title"], text=p["text"]))
                named = {"passage_id": f"{example.id}/{p['title']}"} if ids else {}
                labelled.append(
                    dspy.Example(question=example.question, document=document, grade=grade, **named).with_inputs(
                        "question", "document"
                    )
                )
    return labelled


def grade_match(example: dspy.Example, pred: dspy.Prediction, trace=None) -> float:
    """1.0 when the predicted grade is the label; "ambiguous" never matches a binary label."""
    return float(pred.grade == example.grade)


def balance_labels(
    learned: Sequence[dspy.Example], labelled: Sequence[dspy.Example], k: int, key: str = "grade"
) -> list[dspy.Example]:
    """At most ``k`` demonstrations, as many of each label (``key``) as ``k`` allows, taken in turns: the ``learned``
    ones of a label first, then ``labelled`` examples of that label that are not shown yet (same question and
    document)."""
    labels = list(dict.fromkeys(str(e.get(key)) for e in labelled))
    chosen = {label: [d for d in learned if str(d.get(key)) == label] for label in labels}
    shown = {(d.get("question"), d.get("document")) for d in learned}
    for example in labelled:
        if (example.get("question"), example.get("document")) not in shown and str(example.get(key)) in chosen:
            chosen[str(example.get(key))].append(example)
            shown.add((example.get("question"), example.get("document")))
    turns = [chosen[label][i] for i in range(k) for label in labels if i < len(chosen[label])]
    return turns[:k]


class Grader(Method):
    """One ``Predict(Grade)`` as a method of its own, so that a teleprompter compiles it as it compiles any method:
    it retrieves nothing, and its demonstrations are (question, document) -> grade, one document each."""

    name = "grader"
    retrieves = False
    demo_documents = False

    def __init__(self):
        super().__init__()
        self.grade = dspy.Predict(Grade)

    def forward(self, question: str, document: str) -> dspy.Prediction:
        return self.grade(question=question, document=document)


def graders(program: Method) -> list[dspy.Predict]:
    """The program's predictors whose signature is Grade's (question, document -> grade)."""
    fields = set(Grade.fields)
    return [p for p in program.predictors() if set(p.signature.fields) == fields]


def compile_graders(
    program: Method,
    trainset: Sequence[dspy.Example],
    *,
    optimizer: str | Teleprompter,
    shots: int,
    calibrate: bool = False,
    **kwargs,
) -> Method:
    """Compile one ``Grader`` (a ``Predict(Grade)``) on ``grade_examples(trainset)`` with ``optimizer`` and give its
    demos and instructions to every grader of ``program`` (changed in place and returned); with ``calibrate``, each
    grader (a ``CalibratedPredict``) then learns its prior on content-free inputs with ``kwargs["lm"]``, the LM that
    will grade. ``optimizer`` is a name in ``OPTIMIZERS``, built with ``kwargs`` as ``compile_program`` builds it (lm,
    adapter, seed, ...), or a teleprompter already built, copied onto ``grade_match``. A program without graders, or
    ``none``, is returned as it is."""
    targets = graders(program)
    if not targets or getattr(optimizer, "name", optimizer) == "none":
        return program
    labelled = grade_examples(trainset)
    if not labelled:
        raise ValueError("compile_graders: no training example has paragraphs to label (field 'paragraphs')")
    lm, adapter, valset = (kwargs.pop(key, None) for key in ("lm", "adapter", "valset"))
    if isinstance(optimizer, str):
        built = teleprompter(optimizer, metric=grade_match, shots=shots, docs_per_demo=0, **kwargs)
    else:
        built = optimizer.replaced(metric=grade_match, docs_per_demo=0)
    grader = compile_with(built, Grader(), labelled, lm=lm, adapter=adapter, valset=valset)
    learned = grader.predictors()[0]
    demos = balance_labels(learned.demos, labelled, shots)
    for target in targets:
        target.demos = [dspy.Example(dict(demo.items())) for demo in demos]
        target.signature = target.signature.with_instructions(learned.signature.instructions)
        if calibrate:
            if not isinstance(target, CalibratedPredict):
                raise ValueError(f"compile_graders(calibrate=True): the grader {target!r} is not a CalibratedPredict")
            with dspy.context(adapter=adapter or dspy.settings.adapter):
                target.calibrate(lm=lm)
            logger.info("grader calibrated: prior %s", {k: round(v, 3) for k, v in target.calibration.items()})
    return program
