"""IterDRAG compiled by the bootstrap on a script: multi-hop training questions, an LM that asks one follow-up per
question (two on some), and the compile call (shared by tests/optimizers/test_teleprompters.py and
test_bootstrap.py)."""

import dspy
from doubles import FixedRetriever, examples
from dspy.utils import DummyLM

from ragscale.optimizers.metrics import em_metric
from ragscale.optimizers.teleprompters import compile_program
from ragscale.programs import IterDRAG


def multi_hop(n: int = 5) -> list[dspy.Example]:
    """``examples(n)`` marked multi-hop, as HotpotQA's bridge questions are."""
    return [example.copy(type="bridge") for example in examples(n)]


def following_up(chains: frozenset[int] = frozenset()) -> DummyLM:
    """A DummyLM that asks one follow-up per question ("Which city holds landmark i?"), answers it, then says
    "none" and answers the question rightly; question i in ``chains`` gets a second follow-up ("Which country holds
    city i?") before the "none"."""
    replies = {}
    for i, ex in enumerate(examples(9)):
        follow_up, second = f"Which city holds landmark {i}?", f"Which country holds city {i}?"
        if i in chains:
            replies[f"Q: {second}"] = {"follow_up": "none", "answer": ex.answers[0]}  # the 3rd decomposition
            replies[f"Q: {follow_up}"] = {"follow_up": second, "answer": ex.answers[0]}  # the 2nd
            replies[second] = {"answer": ex.answers[0]}
        else:
            replies[f"Q: {follow_up}"] = {"follow_up": "none", "answer": ex.answers[0]}  # the 2nd decomposition
        replies[follow_up] = {"answer": ex.answers[0]}  # the intermediate answer
        replies[ex.question] = {"follow_up": follow_up}  # the first decomposition
    return DummyLM(replies)


def compile_iterdrag(lm, trainset, **kwargs) -> dspy.Module:
    return compile_program(
        IterDRAG(FixedRetriever(), k=2, max_iterations=3),
        trainset,
        optimizer="bootstrap",
        metric=em_metric,
        shots=2,
        docs_per_demo=5,
        lm=lm,
        adapter=dspy.ChatAdapter(),
        **kwargs,
    )
