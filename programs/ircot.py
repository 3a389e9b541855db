"""IRCoT: retrieval interleaved with chain-of-thought, one reasoning sentence at a time.

Trivedi et al. 2023, "Interleaving Retrieval with Chain-of-Thought Reasoning for Knowledge-Intensive
Multi-Step Questions": retrieve for the question; then alternate a reason step (write the next sentence of
the chain of thought given the question, the passages collected and the sentences so far) and a retrieve
step (the new sentence is the query; its passages join the collection), until a sentence says "the answer
is" or a step cap; a reader then answers from all passages collected (capped, 15 in the paper). In DSPy:
``Predict(ContinueReasoning)`` writes one sentence per call, the retriever is called with that sentence, and
``Predict(Answer)`` is the reader.

The collection keeps the order in which passages joined it (each retrieval's new passages appended, most relevant
last within them), so each reason step's prompt begins with the previous step's documents and an engine that reuses
computed prefixes computes only what the step added.
"""

import dspy

from ragscale.programs.base import Method
from ragscale.programs.behaviour import is_multi_hop
from ragscale.programs.retrieval import Passage, format_passage, most_relevant_last, references
from ragscale.signatures import Answer
from ragscale.signatures.methods import ContinueReasoning

ANSWER_MARKER = "the answer is"


class IRCoT(Method):
    """retrieve(question); repeat: reason -> next sentence; stop at 'the answer is'; retrieve(sentence); answer."""

    name = "ircot"

    def __init__(self, retriever, k: int, max_steps: int = 4, max_passages: int = 15):
        super().__init__()
        self.retriever, self.k, self.max_steps, self.max_passages = retriever, k, max_steps, max_passages
        self.reason = dspy.Predict(ContinueReasoning)
        self.answer = dspy.Predict(Answer)

    def max_documents(self) -> dict[str, int]:
        """The most documents each predictor can see in one call (for context-window checks)."""
        return {"reason": self.max_passages, "answer": self.max_passages}

    @staticmethod
    def behaviour(question: str, prediction: dspy.Prediction) -> dict[str, float]:
        """Reasoning steps written, and the retrievals they led to (one per step that did not yet state the
        answer)."""
        return {"steps": len(prediction.reasoning), "step_retrievals": len(prediction.queries) - 1}

    def demonstrates(self, example: dspy.Example, prediction: dspy.Prediction) -> bool:
        """A trace shows IRCoT's step when, on a multi-hop question, a reasoning sentence led to a retrieval: a
        trace that states the answer in its first sentence never interleaves. A single-hop question may go
        without."""
        return not is_multi_hop(example) or self.behaviour(example.question, prediction)["step_retrievals"] >= 1

    def forward(self, question: str) -> dspy.Prediction:
        queries, reasoning = [question], []
        passages = self.collect([], self.retriever(question, self.k))
        for _ in range(self.max_steps):
            documents = [format_passage(p) for p in passages]
            sentence = self.reason(documents=documents, question=question, reasoning=list(reasoning)).next_sentence
            reasoning.append(sentence)
            if ANSWER_MARKER in sentence.lower():
                break
            queries.append(sentence)  # the new sentence is the next query
            passages = self.collect(passages, self.retriever(sentence, self.k))
        answer = self.answer(documents=[format_passage(p) for p in passages], question=question).answer
        return dspy.Prediction(answer=answer, passages=references(passages), reasoning=reasoning, queries=queries)

    def collect(self, collected: list[Passage], ranking: list[Passage]) -> list[Passage]:
        """``collected`` with the passages of ``ranking`` it lacks appended (most relevant last), up to
        ``max_passages``."""
        seen = {p.id for p in collected}
        new = [p for p in most_relevant_last(ranking) if p.id not in seen]
        return [*collected, *new][: self.max_passages]
