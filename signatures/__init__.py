"""Typed DSPy signatures: the prompts of every ragscale method."""

from ragscale.signatures.qa import (
    Answer,
    AnswerClosedBook,
    AnswerSub,
    Decompose,
    Grade,
    Hypothesize,
    StepBack,
    Synthesize,
)

__all__ = ["Answer", "AnswerClosedBook", "AnswerSub", "Decompose", "Grade", "Hypothesize", "StepBack", "Synthesize"]
