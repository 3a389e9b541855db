"""IterDRAG compiled by the bootstrap on a script: multi-hop training questions, an LM that asks one follow-up per
question, and the compile call (shared by tests/optimizers/test_teleprompters.py and test_bootstrap.py)."""

import dspy
from doubles import FixedRetriever, examples
from dspy.utils import DummyLM

from ragscale.optimizers.metrics import em_metric
from ragscale.optimizers.teleprompters import compile_program
from ragscale.programs import IterDRAG


def multi_hop(n: int = 5) -> list[dspy.Example]:
    """``examples(n)`` marked multi-hop, as HotpotQA's bridge questions are."""
    return [example.copy(type="bridge") for example in examples(n)]


def following_up() -> DummyLM:
    """A DummyLM that asks one follow-up per question ("Which city holds landmark i?"), answers it, then says
    "none" and answers the question rightly."""
    replies = {}
    for i, ex in enumerate(examples()):
        follow_up = f"Which city holds landmark {i}?"
        replies[f"Q: {follow_up}"] = {"follow_up": "none", "answer": ex.answers[0]}  # the 2nd decomposition
        replies[follow_up] = {"answer": ex.answers[0]}  # the intermediate answer
        replies[ex.question] = {"follow_up": follow_up}  # the first decomposition
    return DummyLM(replies)


def compile_iterdrag(lm, trainset, **kwargs) -> dspy.Module:
    return compile_program(
        IterDRAG(FixedRetriever(), k=2, max_iterations=2),
        trainset,
        optimizer="bootstrap",
        metric=em_metric,
        shots=2,
        docs_per_demo=5,
        lm=lm,
        adapter=dspy.ChatAdapter(),
        **kwargs,
    )
