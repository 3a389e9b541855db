"""What the estimator runs a program against instead of the model and the index: a script of the model's replies
along one path of a question, the adapter that counts the requests and replies from the script, and the stand-in
documents a follow-up finds (see ``estimate.py``'s module docstring)."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ragscale.optimizers.demos import NO_FOLLOW_UP
from ragscale.optimizers.metrics import gold_answers

if TYPE_CHECKING:
    from ragscale.programs.retrieval import Passage

Messages = list[dict[str, Any]]


class StandIns:
    """The retriever the estimator's programs search with: the sweep's retriever (or, without one, the data's own
    paragraphs in turn), rankings cached; a stand-in follow-up of a question finds the next k documents the
    question ranks, as a real follow-up would find new ones. Shared, not copied, when DSPy copies a program."""

    def __init__(self, retriever, pool: Sequence[Passage]):
        self.retriever, self.pool = retriever, list(pool)
        self._rankings: dict[tuple[str, int], list[Passage]] = {}
        self._follow_ups: dict[str, tuple[str, int]] = {}  # stand-in text -> (question, step)

    def ranking(self, query: str, k: int) -> list[Passage]:
        """The k passages found for ``query``, most relevant first."""
        if (query, k) not in self._rankings:
            if self.retriever is None:
                self._rankings[query, k] = list(itertools.islice(itertools.cycle(self.pool), k))
            else:
                self._rankings[query, k] = list(self.retriever(query, k))
        return self._rankings[query, k]

    def follow_up(self, question: str, step: int) -> str:
        """A stand-in for the follow-up a question asks at ``step``: the question, numbered."""
        text = f"{question} ({step + 1})"
        self._follow_ups[text] = (question, step)
        return text

    def __call__(self, query: str, k: int) -> list[Passage]:
        if query in self._follow_ups:
            question, step = self._follow_ups[query]
            return self.ranking(question, k * (step + 2))[k * (step + 1) :]
        return self.ranking(query, k)

    def __deepcopy__(self, memo: dict) -> StandIns:
        return self


class Script:
    """Plays the model along path ``follow_ups`` for one question (see the module docstring)."""

    def __init__(self, example, follow_ups: int, seen: Sequence[tuple[str, str]], stand_ins: StandIns):
        self.question = example.question
        self.answer = (list(example.answers) or [""])[0]
        self.follow_ups, self.seen, self.stand_ins = follow_ups, list(seen), stand_ins
        self.decided: Counter[str] = Counter()  # step decisions made so far, per signature

    def outputs(self, signature, inputs: Mapping[str, Any]) -> dict[str, Any]:
        fields = signature.output_fields
        if "follow_up" in fields or any(field.annotation is bool for field in fields.values()):  # a step decision
            step = self.decided[signature.__name__]
            self.decided[signature.__name__] += 1
            yes = step < self.follow_ups
            if not yes:
                text = NO_FOLLOW_UP
            elif step < len(self.seen):
                text = self.seen[step][0]
            else:
                text = self.stand_ins.follow_up(self.question, step)
            return {name: yes if field.annotation is bool else text for name, field in fields.items()}
        asked = dict(self.seen)
        answer = next((asked[v] for v in inputs.values() if isinstance(v, str) and v in asked), self.answer)
        return dict.fromkeys(fields, answer)


class ScriptedAdapter:
    """An adapter that counts the requests the real adapter would send and replies from the script instead of the
    LM: each predictor call appends its requests, (messages, input tokens, expected output tokens), to
    ``requests``. ``estimator`` counts them (``ContextEstimator.count``)."""

    def __init__(self, estimator, script: Script):
        self.estimator, self.script = estimator, script
        self.requests: list[tuple[Messages, int, int]] = []

    def __call__(self, lm, lm_kwargs, signature, demos, inputs) -> list[dict[str, Any]]:
        outputs = self.script.outputs(signature, inputs)
        self.requests.extend(self.estimator.count(signature, demos, inputs, outputs))
        return [outputs]


STAND_IN_HOPS = 2
"""The steps of a stand-in chain: the hops of a two-hop question (HotpotQA's, 2WikiMultihopQA's)."""


def with_a_chain(example):
    """``example`` with a decomposition of ``STAND_IN_HOPS`` steps (each its own question, answered by its gold
    answer) when it has none."""
    if example.get("decomposition"):
        return example
    step = {"question": example.question, "answer": gold_answers(example)[0]}
    return example.copy(decomposition=[step] * STAND_IN_HOPS)
