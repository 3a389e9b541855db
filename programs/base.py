"""The method contract: what the rest of ragscale may ask of a RAG method, each with a default.

Every method is a ``Method`` (a ``dspy.Module``) registered in ``ragscale.programs.PROGRAMS`` under its ``name``.
Runs, sweeps, the context-window check, the teleprompters and ``compare`` read only what a method declares here,
never its name, so a new method is one file and one line in the registry:

- ``retrieves``: whether it searches a corpus. Closed-book does not; a run then reads no corpus, checks no k
  against one, reports no recall, and ``compare`` pairs other runs against it by default.
- ``iterates``: whether it takes the paper's iterations n (Yue et al. 2024's IterDRAG): it is then built with
  ``max_iterations``, and a sweep varies n for it.
- ``demo_documents``: whether its compiled demonstrations carry the documents retrieved for their own questions
  (DRAG, IterDRAG) or are question -> answer pairs (RAG, whose demonstrations are the paper's many-shot QA).
- ``without_demos``: the method whose program this one is when it has no demonstrations (DRAG's is RAG's: they
  differ only in what a demonstration carries), or none; a sweep then runs that one's zero-shot points for both.
- ``reaches_cap``: the ``behaviour`` count that equals ``max_iterations`` exactly when the cap ended a question's loop
  (IterDRAG's ``follow_ups``: each iteration asks one follow-up or ends the loop), or none; a sweep then carries a
  question that stopped before a smaller cap to a larger one (``experiments/sweep/carry.py``).
- ``record_fields``: the list fields of its prediction a per-question record keeps (the follow-ups a decomposing
  method asked and their answers); every record holds every registered method's, empty where its own has none.
- ``max_documents()``: the most documents each predictor can see in one call, and ``max_list_items()``: the most
  entries a list input (follow-ups so far) holds; the context-window check formats the longest prompt from both.
- ``behaviour(question, prediction)``: what the method's defining step did on one question (``programs.behaviour``).
- ``demonstrates(example, prediction)``: whether a trace shows that step, and so may become a demonstration.
- ``demo_set_lacks(predictor, demos, examples)``: what a predictor's demonstrations, taken together, fail to show of
  that step (IterDRAG: a chain of two follow-ups; a stop only after an answered one), or None.
- ``floors``: ``(name, least)`` pairs, the mean ``behaviour`` values a compiled program must keep on training
  questions held back from compiling (``floor_examples`` of them: only the multi-hop ones where
  ``floors_multi_hop``), below which it is another method (``optimizers/floors.py``).
- ``compile_defaults``: the run settings (``teacher``, ``shots``, ``train_limit``) it is compiled with when the
  default LM reads it, by an optimizer whose teacher writes its demonstrations, and the run gives none of them
  (``experiments/config.with_method_defaults``): a method the small reader's own chains teach to skip its step
  names a larger teacher.
- ``demo_queries(predictor, demo)``: the queries whose retrieved documents a demonstration of that predictor shows
  (its question by default), so that its documents can be retrieved again at another k.

Every method is built as ``cls(retriever=..., k=...)`` (plus ``max_iterations`` when it iterates), with no default
for either: the documents per query and the iterations are the run's (``RunConfig.docs``, ``.iterations``), whose
defaults are the only ones. ``retriever`` and ``k`` are kept as attributes, since a demonstration's documents are
retrieved with the student's own. A plain function given as the retriever (a user's own search, returning texts or
``{title, text}`` dicts) is wrapped so that it returns passages (``retrieval/function.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

import dspy

from ragscale.programs.behaviour import is_multi_hop
from ragscale.programs.retrieval.function import as_retriever


class Method(dspy.Module):
    """A RAG method as the rest of ragscale sees it (see the module docstring); subclasses override what differs."""

    name: ClassVar[str]
    """Its name on the command line and in the registry (``ragscale run --method NAME``)."""
    retrieves: ClassVar[bool] = True
    iterates: ClassVar[bool] = False
    demo_documents: ClassVar[bool] = True
    without_demos: ClassVar[str | None] = None
    reaches_cap: ClassVar[str | None] = None
    record_fields: ClassVar[tuple[str, ...]] = ()
    floors: ClassVar[tuple[tuple[str, float], ...]] = ()
    floors_multi_hop: ClassVar[bool] = False
    compile_defaults: ClassVar[Mapping[str, Any]] = MappingProxyType({})

    k: int = 0

    @property
    def retriever(self) -> Any:
        """What the method searches: ``retriever(query, k) -> list[Passage]``; a plain function set here (a user's
        own search returning texts or dicts) is wrapped in a ``FunctionRetriever``."""
        return self.__dict__.get("retriever")

    @retriever.setter
    def retriever(self, value: Any) -> None:  # kept under its own name: DSPy names sub-modules by attribute
        self.__dict__["retriever"] = as_retriever(value)

    def max_documents(self) -> dict[str, int]:
        """The most documents each predictor (by name) can see in one call; a predictor left out sees none."""
        return {name: self.k for name, _ in self.named_predictors()} if self.retrieves else {}

    def max_list_items(self) -> int:
        """The most entries a list input of a predictor (follow-ups, steps so far) holds in one call."""
        return 1

    @staticmethod
    def behaviour(question: str, prediction: dspy.Prediction) -> dict[str, float]:
        """``{}``: no defining step beyond what every method does (see ``ragscale.programs.behaviour``)."""
        return {}

    def demonstrates(self, example: dspy.Example, prediction: dspy.Prediction) -> bool:
        """Whether a trace of ``example`` shows the method's defining step; every trace does by default."""
        return True

    def demo_set_lacks(
        self, predictor: str, demos: Sequence[Mapping[str, Any]], examples: Sequence[dspy.Example]
    ) -> str | None:
        """What the demonstrations ``demos`` of the predictor named ``predictor`` (``demos[i]`` from the training
        question ``examples[i]``) fail to show together of the method's step, or None; none by default."""
        return None

    def floor_examples(self, examples: Sequence[dspy.Example]) -> list[dspy.Example]:
        """The held-back training questions ``floors`` are measured on: the multi-hop ones where ``floors_multi_hop``
        (a single-hop question may need no decomposition), else all."""
        return [ex for ex in examples if is_multi_hop(ex)] if self.floors_multi_hop else list(examples)

    def demo_queries(self, predictor: str, demo: Mapping[str, Any]) -> list[str]:
        """The queries whose retrieved documents (merged by best rank when several) a demonstration of the predictor
        named ``predictor`` shows: its question by default."""
        return [demo["question"]]
