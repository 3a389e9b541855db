"""Compiling programs: the teleprompter registry, demonstrations with documents, caps, save/load, context check."""

import dspy
import pytest
from dspy.utils import DummyLM

from ragscale.optimizers.metrics import em_metric
from ragscale.optimizers.teleprompters import (
    OPTIMIZERS,
    ContextWindowError,
    LabeledWithDocuments,
    cap_demos,
    check_fits_context,
    compile_program,
)
from ragscale.programs import DRAG, RAG, ClosedBook, IterDRAG
from ragscale.programs.retrieval import Passage, format_passage

BEST, SECOND, THIRD = (Passage(id=f"id-{n}", title=n, text=f"{n} text.") for n in ("Best", "Second", "Third"))


class FixedRetriever:
    """A test double: the same ranking (most relevant first) for every query; shared on copy."""

    def __init__(self, ranking=(BEST, SECOND, THIRD)):
        self.ranking, self.queries = list(ranking), []

    def __call__(self, query: str, k: int) -> list[Passage]:
        self.queries.append(query)
        return self.ranking[:k]

    def __deepcopy__(self, memo):
        return self


def examples(n: int = 5) -> list[dspy.Example]:
    return [
        dspy.Example(id=str(i), question=f"Where is landmark {i}?", answers=[f"City {i}"]).with_inputs("question")
        for i in range(n)
    ]


def answering(right: bool = True) -> DummyLM:
    """A DummyLM that answers every training question (rightly or not) and needs no follow-up."""
    return DummyLM(
        {
            ex.question: {"needs_follow_up": False, "follow_up": "", "answer": ex.answers[0] if right else "Nowhere"}
            for ex in examples()
        }
    )


def test_an_unknown_optimizer_fails_listing_the_valid_ones():
    with pytest.raises(ValueError, match="unknown optimizer 'magic'") as error:
        compile_program(DRAG(FixedRetriever()), examples(), optimizer="magic", metric=em_metric, max_demos=2)
    for name in ("none", "labeled", "bootstrap", "random-search", "mipro"):
        assert name in str(error.value)
    assert set(OPTIMIZERS) == {"none", "labeled", "bootstrap", "random-search", "mipro"}


def test_labeled_drag_demos_carry_their_documents_most_relevant_last_and_capped():
    compiled = compile_program(
        DRAG(FixedRetriever(), k=3),
        examples(),
        optimizer="labeled",
        metric=em_metric,
        max_demos=2,
        max_docs_per_demo=2,
    )
    assert len(compiled.answer.demos) == 2
    for demo in compiled.answer.demos:
        assert demo.documents == [format_passage(SECOND), format_passage(BEST)]
        assert demo.answer == {q.question: q.answers[0] for q in examples()}[demo.question]


def test_labeled_rag_demos_are_question_answer_pairs_without_documents():
    retriever = FixedRetriever()
    compiled = compile_program(RAG(retriever, k=3), examples(), optimizer="labeled", metric=em_metric, max_demos=3)
    assert len(compiled.answer.demos) == 3
    assert all("documents" not in demo and demo.answer.startswith("City") for demo in compiled.answer.demos)
    assert retriever.queries == []


def test_labeled_closed_book_demos_are_question_answer_pairs():
    compiled = compile_program(ClosedBook(), examples(), optimizer="labeled", metric=em_metric, max_demos=2)
    assert [set(demo.keys()) for demo in compiled.answer.demos] == [{"question", "answer"}] * 2


def musique_example() -> dspy.Example:
    return dspy.Example(
        question="Where was the author of The Hobbit born?",
        answers=["Bloemfontein"],
        decomposition=[
            {"id": 1, "question": "Who wrote The Hobbit?", "answer": "Tolkien", "paragraph_support_idx": 0},
            {"id": 2, "question": "Where was #1 born?", "answer": "Bloemfontein", "paragraph_support_idx": 1},
        ],
    ).with_inputs("question")


def test_labeled_iterdrag_learns_decomposition_steps_when_the_example_has_them():
    compiled = LabeledWithDocuments(k=4, max_docs_per_demo=1).compile(
        IterDRAG(FixedRetriever(), k=2), trainset=[musique_example()]
    )
    steps = [(d.follow_ups, d.needs_follow_up, d.follow_up) for d in compiled.decompose.demos]
    assert steps == [
        ([], True, "Who wrote The Hobbit?"),
        (["Q: Who wrote The Hobbit? A: Tolkien"], True, "Where was Tolkien born?"),
        (["Q: Who wrote The Hobbit? A: Tolkien", "Q: Where was Tolkien born? A: Bloemfontein"], False, ""),
    ]
    assert [(d.sub_question, d.answer, d.documents) for d in compiled.answer_sub.demos] == [
        ("Who wrote The Hobbit?", "Tolkien", [format_passage(BEST)]),
        ("Where was Tolkien born?", "Bloemfontein", [format_passage(BEST)]),
    ]
    assert compiled.synthesize.demos[0].answer == "Bloemfontein"


def test_labeled_iterdrag_without_decompositions_teaches_only_the_final_answer():
    compiled = compile_program(
        IterDRAG(FixedRetriever()), examples(), optimizer="labeled", metric=em_metric, max_demos=2
    )
    assert compiled.decompose.demos == [] and compiled.answer_sub.demos == []
    assert len(compiled.synthesize.demos) == 2


def test_labeled_final_answers_of_decomposition_and_rat_show_their_unlabeled_list_inputs_empty():
    from ragscale.programs import PROGRAMS

    recursive, rat = (
        LabeledWithDocuments(k=2).compile(PROGRAMS[name](FixedRetriever()), trainset=examples())
        for name in ("decompose-recursive", "rat")
    )
    assert recursive.decompose.demos == []
    assert [(d.answered, len(d.documents)) for d in recursive.answer.demos] == [([], 3), ([], 3)]
    assert rat.draft.demos == rat.write_query.demos == rat.revise.demos == []
    assert [d.reasoning for d in rat.answer.demos] == [[], []]
    assert {d.answer for d in rat.answer.demos} <= {f"City {i}" for i in range(5)}


def test_cap_demos_keeps_the_last_documents_and_the_first_demos():
    program = DRAG(FixedRetriever())
    program.answer.demos = [dspy.Example(question=f"q{i}", documents=["d1", "d2", "d3"], answer="a") for i in range(3)]
    cap_demos(program, max_demos=2, max_docs_per_demo=1)
    assert [(d.question, d.documents) for d in program.answer.demos] == [("q0", ["d3"]), ("q1", ["d3"])]


def test_bootstrap_compiles_drag_with_traces_holding_their_documents():
    program = DRAG(FixedRetriever(), k=3)
    compiled = compile_program(
        program,
        examples(),
        optimizer="bootstrap",
        metric=em_metric,
        max_demos=2,
        max_docs_per_demo=2,
        lm=answering(right=True),
        adapter=dspy.ChatAdapter(),
    )
    assert len(compiled.answer.demos) == 2
    assert all(demo.get("augmented") for demo in compiled.answer.demos)
    assert all(demo.documents == [format_passage(SECOND), format_passage(BEST)] for demo in compiled.answer.demos)
    assert program.answer.demos == []


def test_bootstrap_tops_up_with_labeled_demos_when_no_trace_passes_the_metric():
    compiled = compile_program(
        DRAG(FixedRetriever(), k=3),
        examples(),
        optimizer="bootstrap",
        metric=em_metric,
        max_demos=2,
        max_docs_per_demo=1,
        lm=answering(right=False),
        adapter=dspy.ChatAdapter(),
    )
    assert len(compiled.answer.demos) == 2
    assert not any(demo.get("augmented") for demo in compiled.answer.demos)
    assert all(
        demo.answer.startswith("City") and demo.documents == [format_passage(BEST)] for demo in compiled.answer.demos
    )


def test_bootstrap_runs_the_program_on_at_most_max_attempts_examples():
    lm = answering(right=False)
    compile_program(
        RAG(FixedRetriever(), k=1),
        examples(),
        optimizer="bootstrap",
        metric=em_metric,
        max_demos=2,
        lm=lm,
        adapter=dspy.ChatAdapter(),
        max_attempts=3,
    )
    assert len(lm.history) == 3


def test_bootstrap_with_threads_keeps_the_traces_the_sequential_loop_keeps():
    right = {1, 4, 6}  # the teacher answers only these training questions rightly
    lm = DummyLM({ex.question: {"answer": ex.answers[0] if int(ex.id) in right else "Nowhere"} for ex in examples(8)})

    def demo_questions(threads: int) -> list[str]:
        compiled = compile_program(
            RAG(FixedRetriever(), k=1),
            examples(8),
            optimizer="bootstrap",
            metric=em_metric,
            max_demos=2,
            lm=lm,
            adapter=dspy.ChatAdapter(),
            threads=threads,
        )
        return [d.question for d in compiled.answer.demos if d.get("augmented")]

    import random

    shuffled = random.Random(0).sample(examples(8), 8)  # as the bootstrap optimizer orders them (seed 0)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        dspy_loop = dspy.BootstrapFewShot(metric=em_metric, max_bootstrapped_demos=2, max_labeled_demos=0).compile(
            RAG(FixedRetriever(), k=1), trainset=shuffled
        )
    sequential = [d.question for d in dspy_loop.answer.demos]
    assert len(sequential) == 2 and {q.split()[-1].rstrip("?") for q in sequential} <= {"1", "4", "6"}
    assert demo_questions(1) == demo_questions(3) == demo_questions(4) == sequential


def test_bootstrap_compiles_iterdrag():
    compiled = compile_program(
        IterDRAG(FixedRetriever(), k=2, max_iterations=2),
        examples(),
        optimizer="bootstrap",
        metric=em_metric,
        max_demos=2,
        max_docs_per_demo=1,
        lm=answering(right=True),
        adapter=dspy.ChatAdapter(),
    )
    assert [d.needs_follow_up for d in compiled.decompose.demos] == [False, False]
    assert all(len(d.documents) == 1 for d in compiled.synthesize.demos)
    assert len(compiled.synthesize.demos) == 2


def test_random_search_compiles_drag_within_the_caps():
    compiled = compile_program(
        DRAG(FixedRetriever(), k=3),
        examples(4),
        optimizer="random-search",
        metric=em_metric,
        max_demos=2,
        max_docs_per_demo=1,
        lm=answering(right=True),
        adapter=dspy.ChatAdapter(),
        num_candidates=1,
    )
    assert isinstance(compiled, DRAG)
    assert len(compiled.answer.demos) <= 2
    assert all(len(demo.documents) == 1 for demo in compiled.answer.demos)


def test_a_saved_program_reloads_to_the_same_demos_and_predictions(tmp_path):
    retriever = FixedRetriever()
    compiled = compile_program(DRAG(retriever, k=2), examples(), optimizer="labeled", metric=em_metric, max_demos=2)
    path = tmp_path / "drag.json"
    compiled.save(str(path), save_program=False)
    reloaded = DRAG(retriever, k=2)
    reloaded.load(str(path))
    assert reloaded.answer.demos == [demo.toDict() for demo in compiled.answer.demos]
    lm = DummyLM({"Where is landmark 4?": {"answer": "City 4"}})
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        before, after = compiled(question="Where is landmark 4?"), reloaded(question="Where is landmark 4?")
    assert before.answer == after.answer == "City 4"
    assert lm.history[0]["messages"] == lm.history[1]["messages"]


def words(text: str) -> int:
    return len(text.split())


def test_context_check_names_the_predictor_the_estimate_and_the_window():
    lm = DummyLM([])  # reserves its max_tokens, 1000, for the answer
    long_document = "Title: " + "word " * 500
    with pytest.raises(ContextWindowError, match=r"DRAG\.answer: .* estimated at \d+ tokens .* 2000 tokens"):
        check_fits_context(
            DRAG(FixedRetriever(), k=5),
            lm,
            question="Where?",
            document=long_document,
            count_tokens=words,
            context_window=2000,
        )


def test_context_check_counts_demos_and_iterdrag_gathered_documents():
    program = IterDRAG(FixedRetriever(), k=2, max_iterations=3)
    estimates = check_fits_context(
        program, None, question="Where?", document="Title: " + "word " * 100, count_tokens=words, context_window=10_000
    )
    assert estimates["synthesize"] > estimates["answer_sub"] + 3 * 2 * 100
    compiled = compile_program(program, examples(), optimizer="labeled", metric=em_metric, max_demos=2)
    with_demos = check_fits_context(
        compiled, None, question="Where?", document="Title: " + "word " * 100, count_tokens=words, context_window=10_000
    )
    assert with_demos["synthesize"] > estimates["synthesize"]


def _has_optuna() -> bool:
    import importlib.util

    return importlib.util.find_spec("optuna") is not None


@pytest.mark.skipif(not _has_optuna(), reason="mipro needs optuna (DSPy's optional dependency)")
def test_mipro_light_compiles_drag_with_a_scripted_lm():
    proposals = {"observations": "o", "summary": "s", "program_description": "p", "module_description": "m"}
    lm = DummyLM([{"answer": "City 1", "proposed_instruction": "Answer in two words.", **proposals}] * 2000)
    compiled = compile_program(
        DRAG(FixedRetriever(), k=2),
        examples(6),
        optimizer="mipro",
        metric=em_metric,
        max_demos=2,
        max_docs_per_demo=1,
        lm=lm,
        adapter=dspy.ChatAdapter(),
    )
    assert isinstance(compiled, DRAG)
    assert len(compiled.answer.demos) <= 2
    system_prompts = [call["messages"][0]["content"] for call in lm.history]
    assert any("`observations`" in prompt for prompt in system_prompts)  # MIPRO's data-aware proposer ran


@pytest.mark.skipif(_has_optuna(), reason="optuna is installed")
def test_mipro_without_optuna_fails_before_any_work_with_an_install_hint():
    lm = DummyLM([])
    with pytest.raises(ImportError, match="pip install 'optuna"):
        compile_program(DRAG(FixedRetriever()), examples(), optimizer="mipro", metric=em_metric, max_demos=2, lm=lm)
    assert lm.history == []


def test_context_check_before_compiling_counts_stand_in_demos_with_their_documents():
    document = "Title: " + "word " * 100
    bare = check_fits_context(
        DRAG(FixedRetriever(), k=2),
        None,
        question="Where?",
        document=document,
        count_tokens=words,
        context_window=10_000,
    )
    planned = check_fits_context(
        DRAG(FixedRetriever(), k=2),
        None,
        question="Where?",
        document=document,
        count_tokens=words,
        context_window=10_000,
        max_demos=3,
        max_docs_per_demo=2,
    )
    without_documents = check_fits_context(
        RAG(FixedRetriever(), k=2),
        None,
        question="Where?",
        document=document,
        count_tokens=words,
        context_window=10_000,
        max_demos=3,
        max_docs_per_demo=2,
    )
    assert planned["answer"] > bare["answer"] + 3 * 2 * 100
    assert bare["answer"] < without_documents["answer"] < bare["answer"] + 3 * 100


@pytest.mark.slow
def test_labeled_drag_on_hotpotqa_with_bm25_puts_each_demo_questions_best_passage_last(shared_datasets):
    from ragscale.data import build_corpus, load_split
    from ragscale.programs.retrieval import BM25Retriever

    train = load_split("hotpotqa", "train", shared_datasets)[:6]
    retriever = BM25Retriever(build_corpus(train))
    compiled = compile_program(
        DRAG(retriever, k=4), train, optimizer="labeled", metric=em_metric, max_demos=3, max_docs_per_demo=2
    )
    assert len(compiled.answer.demos) == 3
    for demo in compiled.answer.demos:
        ranked = retriever(demo.question, 4)
        assert demo.documents == [format_passage(ranked[1]), format_passage(ranked[0])]


def test_a_saved_iterdrag_reloads_its_decomposition_demos(tmp_path):
    compiled = LabeledWithDocuments(k=4).compile(IterDRAG(FixedRetriever(), k=2), trainset=[musique_example()])
    path = tmp_path / "iterdrag.json"
    compiled.save(str(path), save_program=False)
    reloaded = IterDRAG(FixedRetriever(), k=2)
    reloaded.load(str(path))
    for name in ("decompose", "answer_sub", "synthesize"):
        saved = [demo.toDict() for demo in getattr(compiled, name).demos]
        assert getattr(reloaded, name).demos == saved and saved
    assert [d["needs_follow_up"] for d in reloaded.decompose.demos] == [True, True, False]
