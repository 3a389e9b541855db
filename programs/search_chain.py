"""Search-in-the-Chain: the LM plans a chain of queries with expected answers; retrieval checks each node.

Xu et al. 2024, "Search-in-the-Chain: Interactively Enhancing Large Language Models with Search for
Knowledge-intensive Tasks" (SearChain): the LM writes a global chain of query (CoQ), each node a sub-query
with the answer it expects (or "unsolved"); information retrieval verifies each node in order, keeping the
supported ones, correcting the contradicted ones and completing the unsolved ones; after such feedback the LM
re-plans the rest of the chain from the checked nodes; the final answer follows the checked chain. In DSPy:
``Predict(PlanChain)`` writes the global chain from the question alone and ``Predict(ReplanChain)`` the
rest of it from the checked nodes (two steps with their own demonstrations, as the paper prompts the first
chain and the feedback apart; a first plan shown an empty list of checked nodes tends to copy it and plan
nothing), each as two parallel typed lists (``queries``, ``answers``); ``Predict(Verify)`` returns ``supported:
bool`` and the answer the documents support, re-planning is capped by ``max_replans`` and the chain by
``max_nodes``, and ``Predict(Synthesize)`` answers from the checked "query -> answer" pairs and the nodes'
passages merged by rank (at most ``max_passages``, as IRCoT's reader).
"""

import dspy

from ragscale.programs.base import Method
from ragscale.programs.retrieval import format_passage, merge_by_rank, most_relevant_last, references
from ragscale.signatures import Synthesize
from ragscale.signatures.methods import PlanChain, ReplanChain, Verify


def chain_of(plan: dspy.Prediction) -> list[tuple[str, str]]:
    """The planned (query, expected answer) nodes; a query the model gave no answer for expects "unknown"."""
    expected = [*plan.answers, *["unknown"] * len(plan.queries)]
    return list(zip(plan.queries, expected, strict=False))


class SearchChain(Method):
    """plan(question) -> chain; each node: retrieve -> verify (correct, replan the rest); answer(checked chain)."""

    name = "search-chain"

    def __init__(self, retriever, k: int, max_nodes: int = 6, max_replans: int = 2, max_passages: int = 15):
        super().__init__()
        self.retriever, self.k, self.max_nodes, self.max_replans = retriever, k, max_nodes, max_replans
        self.max_passages = max_passages
        self.plan = dspy.Predict(PlanChain)
        self.verify = dspy.Predict(Verify)
        self.replan = dspy.Predict(ReplanChain)
        self.answer = dspy.Predict(Synthesize)

    def max_documents(self) -> dict[str, int]:
        """The most documents each predictor can see in one call (for context-window checks)."""
        return {"verify": self.k, "answer": min(self.k * self.max_nodes, self.max_passages)}

    @staticmethod
    def behaviour(question: str, prediction: dspy.Prediction) -> dict[str, float]:
        """Nodes of the chain checked against retrieval, the share the documents supported, and re-plans."""
        supported = [node["supported"] for node in prediction.chain]
        return {
            "steps": len(supported),
            "supported_step_rate": sum(supported) / len(supported) if supported else 0.0,
            "replans": prediction.replans,
        }

    def demonstrates(self, example: dspy.Example, prediction: dspy.Prediction) -> bool:
        """A trace shows Search-in-the-Chain's step when at least one node of its chain was checked against
        retrieval."""
        return self.behaviour(example.question, prediction)["steps"] >= 1

    def forward(self, question: str) -> dspy.Prediction:
        pending = chain_of(self.plan(question=question))
        checked: list[str] = []
        chain: list[dict] = []
        rankings = []
        replans = 0
        while pending and len(chain) < self.max_nodes:
            query, expected = pending.pop(0)
            rankings.append(self.retriever(query, self.k))
            documents = [format_passage(p) for p in most_relevant_last(rankings[-1])]
            check = self.verify(documents=documents, query=query, expected_answer=expected)
            answer = expected if check.supported else check.answer
            checked.append(f"{query} -> {answer}")
            chain.append({"query": query, "expected": expected, "supported": check.supported, "answer": answer})
            if not check.supported and replans < self.max_replans:  # corrected or completed: re-plan the rest
                replans += 1
                pending = chain_of(self.replan(question=question, checked=list(checked)))
        passages = most_relevant_last(merge_by_rank(rankings)[: self.max_passages])
        documents = [format_passage(p) for p in passages]
        answer = self.answer(documents=documents, question=question, follow_ups=checked).answer
        return dspy.Prediction(answer=answer, passages=references(passages), chain=chain, replans=replans)
