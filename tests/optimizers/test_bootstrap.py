"""The threaded bootstrap: the traces DSPy's sequential loop keeps, every step of a passing trace as a
demonstration, and a training example hidden from the teacher's own demonstrations."""

import dspy
from compiling import compile_iterdrag, following_up, multi_hop
from doubles import FixedRetriever, examples
from dspy.utils import DummyLM

from ragscale.optimizers.demos import LabeledWithDocuments
from ragscale.optimizers.metrics import em_metric
from ragscale.optimizers.teleprompters import compile_program
from ragscale.programs import RAG


def test_bootstrap_with_threads_keeps_the_traces_the_sequential_loop_keeps():
    right = {1, 4, 6}  # the teacher answers only these training questions rightly
    lm = DummyLM({ex.question: {"answer": ex.answers[0] if int(ex.id) in right else "Nowhere"} for ex in examples(8)})

    def demo_questions(threads: int) -> list[str]:
        compiled = compile_program(
            RAG(FixedRetriever(), k=1),
            examples(8),
            optimizer="bootstrap",
            metric=em_metric,
            shots=2,
            lm=lm,
            adapter=dspy.ChatAdapter(),
            threads=threads,
            docs_per_demo=5,
        )
        return [d.question for d in compiled.answer.demos if d.get("augmented")]

    import random

    shuffled = random.Random(0).sample(examples(8), 8)  # as the bootstrap optimizer orders them (seed 0)
    teacher = LabeledWithDocuments(2, 5).compile(RAG(FixedRetriever(), k=1), trainset=shuffled[:2])  # shown to it
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        dspy_loop = dspy.BootstrapFewShot(metric=em_metric, max_bootstrapped_demos=2, max_labeled_demos=0).compile(
            RAG(FixedRetriever(), k=1), teacher=teacher, trainset=shuffled[2:]
        )
    sequential = [d.question for d in dspy_loop.answer.demos]
    assert len(sequential) == 2 and {q.split()[-1].rstrip("?") for q in sequential} <= {"1", "4", "6"}
    assert demo_questions(1) == demo_questions(3) == demo_questions(4) == sequential


def test_a_training_example_is_hidden_from_the_teachers_own_demonstrations():
    from ragscale.optimizers.bootstrap import ThreadedBootstrapFewShot

    train = [ex.copy(answer=ex.answers[0]) for ex in examples(2)]  # with an output, so that a demo shows
    lm = DummyLM({ex.question: {"answer": ex.answers[0]} for ex in train})
    teacher = RAG(FixedRetriever(), k=1)
    teacher.answer.demos = [train[0]]  # a teacher compiled on the same training set
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        ThreadedBootstrapFewShot(metric=em_metric, max_bootstrapped_demos=2, max_labeled_demos=0, threads=2).compile(
            RAG(FixedRetriever(), k=1), teacher=teacher, trainset=train
        )
    prompts = {}
    for call in lm.history:
        text = " ".join(str(m["content"]) for m in call["messages"])
        asked = next(ex.question for ex in train if ex.question in str(call["messages"][-1]["content"]))
        prompts[asked] = text
    assert prompts[train[0].question].count(train[0].question) == 1  # asked, not shown as its own demo
    assert train[0].question in prompts[train[1].question]  # the other example still sees the demo
    assert teacher.answer.demos == [train[0]]  # the teacher itself is left as it was


def test_every_step_of_a_passing_trace_is_a_demonstration_the_follow_up_asked_then_the_stop():
    compiled = compile_iterdrag(following_up(), multi_hop())
    first, second = compiled.decompose.demos  # DSPy keeps one sampled call per trace: often only the stop
    assert (first.follow_ups, second.follow_up) == ([], "none")
    assert first.follow_up == second.follow_ups[0].split(" A: ")[0].removeprefix("Q: ")
