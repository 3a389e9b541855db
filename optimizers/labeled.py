"""The teleprompters that run no program: ``none`` (the program zero-shot) and ``labeled`` (demonstrations from the
training examples' labels, each with the documents the program's own retriever finds for it: ``demos.py``)."""

from __future__ import annotations

from typing import Any

from ragscale.optimizers.base import Teleprompter
from ragscale.optimizers.demos import LabeledWithDocuments
from ragscale.programs.base import Method


class ZeroShot(Teleprompter):
    """``none``: a reset copy of the program, with no demonstrations."""

    name = "none"

    def learn(self, student: Method, trainset: list, valset: list | None) -> Method:
        return student.reset_copy()


class Labeled(Teleprompter):
    """``labeled``: DSPy's LabeledFewShot whose demonstrations carry the documents the program's own retriever finds
    for each demonstration's question (Yue et al. 2024, DRAG): ``demos.LabeledWithDocuments`` on ``shots``
    training examples drawn with ``seed``."""

    name = "labeled"

    def __init__(self, *, seed: int = 0, **shared: Any):
        super().__init__(**shared)
        self.seed = seed

    def learn(self, student: Method, trainset: list, valset: list | None) -> Method:
        return LabeledWithDocuments(self.shots, self.docs_per_demo, self.seed).compile(student, trainset=trainset)
