"""The short-answer instruction is one wording (``signatures/instructions.py``), composed into every signature that
asks for an answer, and each composed instruction is the bytes the published results and compiled programs were made
with: a line break moved is another prompt, another compiled state and another run key."""

import pytest

from ragscale.signatures import (
    Answer,
    AnswerClosedBook,
    AnswerFromReasoning,
    AnswerInOrder,
    AnswerSub,
    Synthesize,
)
from ragscale.signatures.instructions import ANSWER_FORMS, SHORT_ANSWER, short_answer

PUBLISHED = {
    Answer: (
        "Answer the question using the documents. Reply with the short answer only: a name, a date, a number,\n"
        "a short phrase, or yes/no. Do not explain."
    ),
    AnswerClosedBook: (
        "Answer the question from what you know. Reply with the short answer only: a name, a date, a number,\n"
        "a short phrase, or yes/no. Do not explain."
    ),
    AnswerSub: "Answer the follow-up question using the documents. Reply with the short answer only.",
    Synthesize: (
        "Answer the question using the follow-up questions with their answers and the documents. Reply with the\n"
        "short answer only: a name, a date, a number, a short phrase, or yes/no. Do not explain."
    ),
    AnswerInOrder: (
        "Answer the question using the documents and the questions already answered before it. Reply with the\n"
        "short answer only: a name, a date, a number, a short phrase, or yes/no. Do not explain."
    ),
    AnswerFromReasoning: (
        "Answer the question from the reasoning steps, which were checked against the documents. Reply with the\n"
        "short answer only: a name, a date, a number, a short phrase, or yes/no. Do not explain."
    ),
}


@pytest.mark.parametrize("signature", list(PUBLISHED), ids=lambda signature: signature.__name__)
def test_a_composed_instruction_is_the_one_published(signature):
    assert signature.instructions == PUBLISHED[signature]
    assert SHORT_ANSWER in " ".join(signature.instructions.split())


def test_the_short_answer_follows_the_task_with_or_without_the_forms_an_answer_takes():
    assert short_answer("Answer it.", width=120) == f"Answer it. {SHORT_ANSWER}: {ANSWER_FORMS}"
    assert short_answer("Answer it.", width=120, forms=False) == f"Answer it. {SHORT_ANSWER}."
    assert short_answer("Answer the follow-up.", width=25, forms=False).splitlines()[0] == "Answer the follow-up."
