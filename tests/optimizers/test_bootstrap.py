"""The threaded bootstrap: the questions DSPy's sequential loop keeps, one demonstration a question per predictor
chosen so that the set shows the method's step, and a training example hidden from the teacher's own
demonstrations."""

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


def test_shots_come_from_distinct_questions_and_show_a_chain_of_two_follow_ups_where_a_trace_has_one():
    import random

    order = [int(ex.id) for ex in random.Random(0).sample(multi_hop(8), 8)][2:]  # the questions run, in order
    chained = order[3]  # only the fourth question run asks two follow-ups
    compiled = compile_iterdrag(following_up(chains=frozenset({chained})), multi_hop(8))
    asked = [demo.follow_ups[0] if demo.follow_ups else demo.follow_up for demo in compiled.decompose.demos]
    assert len(asked) == 2 and len(set(asked)) == 2  # two questions' chains, never two steps of one
    assert [len(demo.follow_ups) for demo in compiled.decompose.demos] == [0, 1]  # a first step, then a second...
    assert compiled.decompose.demos[1].follow_up == f"Which country holds city {chained}?"  # ...of the chain of two
    assert len({demo.sub_question for demo in compiled.answer_sub.demos}) == 2


def test_without_a_chain_of_two_the_shots_are_first_follow_ups_of_distinct_questions_never_a_lone_stop(caplog):
    compiled = compile_iterdrag(following_up(), multi_hop(8))
    demos = compiled.decompose.demos
    assert [demo.follow_ups for demo in demos] == [[], []]  # no stop with nothing answered, no repeated question
    assert demos[0].follow_up != demos[1].follow_up and "none" not in [demo.follow_up for demo in demos]
    assert "no chain of two or more follow-ups" in caplog.text  # the set's shortfall is said


def test_a_set_with_a_stop_before_any_answered_follow_up_is_refused():
    from ragscale.programs import IterDRAG

    program, hop = IterDRAG(FixedRetriever(), k=1, max_iterations=3), multi_hop(1)[0]
    ask = dspy.Example(question="q", follow_ups=[], follow_up="Who?")
    chain = dspy.Example(question="q", follow_ups=["Q: Who? A: Ann"], follow_up="Where?")
    stop = dspy.Example(question="q", follow_ups=[], follow_up="none")
    assert program.demo_set_lacks("decompose", [ask, chain], [hop, hop]) is None
    assert "none" in program.demo_set_lacks("decompose", [chain, stop], [hop, hop])
    assert "chain" in program.demo_set_lacks("decompose", [ask, ask], [hop, hop])
    assert program.demo_set_lacks("decompose", [stop], [hop.copy(type="single-hop")]) is None  # NQ may stop at once
