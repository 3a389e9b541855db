"""Demonstrations with their own documents (labeled), and the caps every compiled program is cut to."""

import dspy
import pytest
from doubles import BEST, SECOND, THIRD, FixedRetriever, examples, musique_example

from ragscale.optimizers.demos import LabeledWithDocuments, cap_demos, redraw_demo_documents
from ragscale.optimizers.metrics import em_metric
from ragscale.optimizers.teleprompters import compile_program
from ragscale.programs import DRAG, RAG, ClosedBook, IterDRAG
from ragscale.programs.retrieval import format_passage


def test_labeled_drag_demos_carry_their_documents_most_relevant_last_and_capped():
    compiled = compile_program(
        DRAG(FixedRetriever(), k=3),
        examples(),
        optimizer="labeled",
        metric=em_metric,
        shots=2,
        docs_per_demo=2,
    )
    assert len(compiled.answer.demos) == 2
    for demo in compiled.answer.demos:
        assert demo.documents == [format_passage(SECOND), format_passage(BEST)]
        assert demo.answer == {q.question: q.answers[0] for q in examples()}[demo.question]


def test_labeled_rag_demos_are_question_answer_pairs_without_documents():
    retriever = FixedRetriever()
    compiled = compile_program(
        RAG(retriever, k=3), examples(), optimizer="labeled", metric=em_metric, docs_per_demo=5, shots=3
    )
    assert len(compiled.answer.demos) == 3
    assert all("documents" not in demo and demo.answer.startswith("City") for demo in compiled.answer.demos)
    assert retriever.queries == []


def test_labeled_closed_book_demos_are_question_answer_pairs():
    compiled = compile_program(
        ClosedBook(), examples(), optimizer="labeled", metric=em_metric, docs_per_demo=5, shots=2
    )
    assert [set(demo.keys()) for demo in compiled.answer.demos] == [{"question", "answer"}] * 2


def test_labeled_iterdrag_learns_decomposition_steps_one_from_each_question_together_a_chain_of_two():
    hobbit = musique_example().copy(type="2hop")
    dune = dspy.Example(
        question="Where was the author of Dune born?", answers=["Tacoma"], type="2hop",
        decomposition=[{"question": "Who wrote Dune?", "answer": "Herbert"},
                       {"question": "Where was #1 born?", "answer": "Tacoma"}],
    ).with_inputs("question")  # fmt: skip
    compiled = LabeledWithDocuments(shots=2, docs_per_demo=1).compile(
        IterDRAG(FixedRetriever(), k=2, max_iterations=3), trainset=[hobbit, dune]
    )
    steps = [(d.follow_ups, d.follow_up) for d in compiled.decompose.demos]
    first, second = sorted(steps, key=lambda step: len(step[0]))
    assert first[0] == [] and first[1] in ("Who wrote The Hobbit?", "Who wrote Dune?")  # a first step...
    assert len(second[0]) == 1 and second[1].startswith("Where was")  # ...and a second, of the other question
    assert first[1].split()[-1] not in second[0][0]
    assert {d.sub_question for d in compiled.answer_sub.demos} & {"Who wrote The Hobbit?", "Where was Tolkien born?"}
    assert len({d.answer for d in compiled.answer_sub.demos}) == 2 and len(compiled.answer_sub.demos) == 2
    assert {d.answer for d in compiled.synthesize.demos} == {"Bloemfontein", "Tacoma"}


def test_labeled_demonstrations_come_from_distinct_questions_as_many_as_the_trainset_has():
    compiled = LabeledWithDocuments(shots=4, docs_per_demo=1).compile(
        IterDRAG(FixedRetriever(), k=2, max_iterations=3), trainset=[musique_example()]
    )
    assert [len(p.demos) for p in compiled.predictors()] == [1, 1, 1]  # one question: one demonstration each
    assert [(d.sub_question, d.answer, d.documents) for d in compiled.answer_sub.demos] == [
        ("Who wrote The Hobbit?", "Tolkien", [format_passage(BEST)])
    ]


def test_labeled_iterdrag_without_decompositions_teaches_only_the_final_answer():
    compiled = compile_program(
        IterDRAG(FixedRetriever(), k=3, max_iterations=3),
        examples(),
        optimizer="labeled",
        metric=em_metric,
        shots=2,
        docs_per_demo=5,
    )
    assert compiled.decompose.demos == [] and compiled.answer_sub.demos == []
    assert len(compiled.synthesize.demos) == 2


def test_labeled_final_answers_of_decomposition_and_rat_show_their_unlabeled_list_inputs_empty():
    from ragscale.programs import PROGRAMS

    recursive, rat = (
        LabeledWithDocuments(shots=2, docs_per_demo=5).compile(
            PROGRAMS[name](FixedRetriever(), k=3), trainset=examples()
        )
        for name in ("decompose-recursive", "rat")
    )
    assert recursive.decompose.demos == []
    assert [(d.answered, len(d.documents)) for d in recursive.answer.demos] == [([], 3), ([], 3)]
    assert rat.draft.demos == rat.write_query.demos == rat.revise.demos == []
    assert [d.reasoning for d in rat.answer.demos] == [[], []]
    assert {d.answer for d in rat.answer.demos} <= {f"City {i}" for i in range(5)}


def test_a_chain_written_at_one_k_is_shown_with_its_queries_documents_at_another():
    retriever = FixedRetriever()
    compiled = LabeledWithDocuments(shots=4, docs_per_demo=1).compile(
        IterDRAG(retriever, k=1, max_iterations=3), trainset=[musique_example()]
    )
    assert [d.documents for d in compiled.answer_sub.demos] == [[format_passage(BEST)]]
    retriever.queries.clear()
    redraw_demo_documents(compiled, 3)
    ranked = [format_passage(p) for p in (THIRD, SECOND, BEST)]  # most relevant last
    assert [d.documents for d in compiled.answer_sub.demos] == [ranked]
    assert compiled.synthesize.demos[0].documents == ranked  # the three rankings merged, each passage once
    question, first, second = musique_example().question, "Who wrote The Hobbit?", "Where was Tolkien born?"
    assert retriever.queries == [first, question, first, second]  # answer_sub's, then synthesize's
    assert [d.follow_up for d in compiled.decompose.demos] == [first]  # no documents: left as it was


def test_cap_demos_keeps_the_last_documents_and_the_first_demos():
    program = DRAG(FixedRetriever(), k=5)
    program.answer.demos = [dspy.Example(question=f"q{i}", documents=["d1", "d2", "d3"], answer="a") for i in range(3)]
    cap_demos(program, shots=2, docs_per_demo=1)
    assert [(d.question, d.documents) for d in program.answer.demos] == [("q0", ["d3"]), ("q1", ["d3"])]


@pytest.mark.slow
def test_labeled_drag_on_hotpotqa_with_bm25_puts_each_demo_questions_best_passage_last(shared_datasets):
    from ragscale.data import build_corpus, load_split
    from ragscale.programs.retrieval import BM25Retriever

    train = load_split("hotpotqa", "train", shared_datasets)[:6]
    retriever = BM25Retriever(build_corpus(train))
    compiled = compile_program(
        DRAG(retriever, k=4), train, optimizer="labeled", metric=em_metric, shots=3, docs_per_demo=2
    )
    assert len(compiled.answer.demos) == 3
    for demo in compiled.answer.demos:
        ranked = retriever(demo.question, 4)
        assert demo.documents == [format_passage(ranked[1]), format_passage(ranked[0])]
