"""What every method shares: the registry builds each from the same components, each answers with the passages
it used, names its predictors after its steps, shares its retriever when copied, compiles, says how many
documents its predictors see, and reports its defining step (parametrized over the methods)."""

import copy

import dspy
import pytest
from dspy.utils import DummyLM
from method_doubles import HAPPY_PATHS, IDS, QUESTION, OverlapRetriever, TableRetriever, ids, passage, run

from ragscale.programs import PROGRAMS, build_program


def test_registry_names_every_method_and_builds_each_from_the_same_components():
    retriever = TableRetriever([passage("A")])
    assert {"closed-book", "rag", "drag", "iterdrag"} <= set(PROGRAMS)
    assert len(PROGRAMS) == 15
    for cls in PROGRAMS.values():
        extra = {"max_iterations": 2} if cls.iterates else {}
        assert isinstance(cls(retriever=retriever, k=2, **extra), dspy.Module)


@pytest.mark.parametrize("method", sorted(PROGRAMS))
def test_every_program_says_how_many_documents_each_predictor_that_reads_documents_sees(method):
    program = build_program(method, TableRetriever([]), k=4, iterations=2)
    seen = program.max_documents()
    readers = {name for name, p in program.named_predictors() if "documents" in p.signature.input_fields}
    assert set(seen) == readers
    assert all(count >= 4 for count in seen.values())


def test_build_program_gives_iterdrag_its_iterations_and_names_the_valid_methods():
    assert build_program("iterdrag", None, k=2, iterations=5).max_iterations == 5
    with pytest.raises(ValueError, match=r"unknown method 'ragg'.*closed-book.*self-rag"):
        build_program("ragg", k=2, iterations=1)


@pytest.mark.parametrize("method", ["closed-book", "rag", "drag"])
def test_a_method_without_a_defining_step_says_so_with_no_behaviour(method):
    assert PROGRAMS[method].behaviour(QUESTION, dspy.Prediction(answer="x", passages=[])) == {}


@pytest.mark.parametrize("method", HAPPY_PATHS)
def test_every_method_returns_the_answer_and_the_passages_it_used_by_id_and_title(method):
    build, outputs, _ = HAPPY_PATHS[method]
    prediction, _ = run(build(OverlapRetriever()), outputs)
    assert prediction.answer == "Denver"
    assert prediction.passages, "no passages reported"
    assert all(set(p) == {"id", "title"} for p in prediction.passages)
    assert set(ids(prediction)) <= IDS
    assert len(set(ids(prediction))) == len(prediction.passages), "a passage is reported twice"


@pytest.mark.parametrize("method", HAPPY_PATHS)
def test_predictors_are_named_after_the_steps_of_the_algorithm(method):
    build, _, names = HAPPY_PATHS[method]
    assert [name for name, _ in build(OverlapRetriever()).named_predictors()] == names


@pytest.mark.parametrize("method", HAPPY_PATHS)
def test_a_copied_program_shares_its_retriever_and_answers_the_same(method):
    build, outputs, _ = HAPPY_PATHS[method]
    retriever = OverlapRetriever()
    program = build(retriever)
    copied = copy.deepcopy(program)
    assert copied.retriever is retriever
    assert run(copied, outputs)[0].passages == run(program, outputs)[0].passages


# The predictors a happy path does not call (CRAG rewrites only after a failed grading; Self-RAG rewrites only
# after a poor round and answers directly only without retrieval) get no bootstrapped demonstrations.
NOT_CALLED = {"crag": {"rewrite"}, "self-rag": {"rewrite", "answer_directly"}}


TRAINSET = [dspy.Example(question=QUESTION, answers=["Denver"]).with_inputs("question")]


def bootstrap(method: str, retriever: OverlapRetriever) -> dspy.Module:
    from ragscale.optimizers.metrics import em_metric
    from ragscale.optimizers.teleprompters import compile_program

    build, outputs, _ = HAPPY_PATHS[method]
    lm = DummyLM(outputs)
    return compile_program(
        build(retriever), TRAINSET, optimizer="bootstrap", metric=em_metric, shots=1, docs_per_demo=2, lm=lm
    )


@pytest.mark.parametrize("method", HAPPY_PATHS)
def test_bootstrap_gives_every_called_predictor_a_demonstration_from_its_own_trace(method):
    retriever = OverlapRetriever()
    compiled = bootstrap(method, retriever)
    demos = {name: predictor.demos for name, predictor in compiled.named_predictors()}
    called = set(demos) - NOT_CALLED.get(method, set())
    assert {name for name, shown in demos.items() if shown} == called
    assert all(len(shown) == 1 for shown in demos.values() if shown)
    assert all(len(demo.get("documents", [])) <= 2 for shown in demos.values() for demo in shown)
    assert compiled.retriever is retriever
    replies = HAPPY_PATHS[method][1]
    for name, predictor in compiled.named_predictors():
        for demo in predictor.demos:
            assert {field: demo[field] for field in predictor.signature.output_fields} in replies, name


@pytest.mark.parametrize("method", HAPPY_PATHS)
def test_a_compiled_program_saved_as_json_reloads_with_the_same_demonstrations(method, tmp_path):
    retriever = OverlapRetriever()
    compiled = bootstrap(method, retriever)
    compiled.save(tmp_path / "program.json")
    reloaded = HAPPY_PATHS[method][0](retriever)
    reloaded.load(tmp_path / "program.json")
    for (name, mine), (_, theirs) in zip(compiled.named_predictors(), reloaded.named_predictors(), strict=True):
        assert [dict(d.items()) for d in theirs.demos] == [dict(d.items()) for d in mine.demos], name


@pytest.mark.parametrize("method", HAPPY_PATHS)
def test_labeled_demonstrations_of_the_final_answer_carry_documents_retrieved_for_the_demo_question(method):
    from ragscale.optimizers.metrics import em_metric
    from ragscale.optimizers.teleprompters import compile_program

    retriever = OverlapRetriever()
    program = HAPPY_PATHS[method][0](retriever)
    compiled = compile_program(program, TRAINSET, optimizer="labeled", metric=em_metric, shots=1, docs_per_demo=5)
    for name, predictor in compiled.named_predictors():
        if predictor.signature.__name__ in ("Answer", "Synthesize"):
            assert [demo.answer for demo in predictor.demos] == ["Denver"], name
            assert predictor.demos[0].documents, name
    assert all(not predictor.demos for predictor in program.predictors()), "compiling changed the program"


@pytest.mark.parametrize("method", HAPPY_PATHS)
def test_the_context_check_counts_every_document_each_predictor_can_see(method):
    from ragscale.optimizers.context import check_fits_context

    program = HAPPY_PATHS[method][0](OverlapRetriever())
    document = " ".join(["word"] * 100)
    estimates = check_fits_context(
        program,
        None,
        question=QUESTION,
        document=document,
        count_tokens=lambda text: text.count("word"),
        context_window=10**6,
    )
    assert set(estimates) == {name for name, _ in program.named_predictors()}
    seen = program.max_documents()
    for name, predictor in program.named_predictors():
        if "documents" in predictor.signature.input_fields:
            assert estimates[name] >= 100 * seen[name], name


# What each happy path's defining step did (``behaviour``): rates 0-1, counts per question.
BEHAVIOUR = {
    "multi-query": {"distinct_queries": 3},
    "rag-fusion": {"distinct_queries": 3},
    "decompose-recursive": {"sub_questions": 2, "distinct_sub_questions": 2},
    "decompose-individual": {"sub_questions": 2, "distinct_sub_questions": 2},
    "step-back": {"step_back_rate": 1.0},
    "hyde": {"hypothetical_passage_rate": 1.0, "hypothetical_passage_words": 10},
    "ircot": {"steps": 2, "step_retrievals": 1},
    "search-chain": {"steps": 2, "supported_step_rate": 0.5, "replans": 1},
    "rat": {"steps": 2, "revised_step_rate": 0.5},
    "crag": {"graded_relevant": 1 / 3, "graded_irrelevant": 1 / 3, "graded_ambiguous": 1 / 3, "corrective_rate": 0.0},
    "self-rag": {
        "retrieval_rate": 1.0,
        "rounds": 1,
        "relevant_passage_rate": 0.5,
        "supported_fully_rate": 1.0,
        "supported_partially_rate": 0.0,
        "supported_none_rate": 0.0,
    },
}


@pytest.mark.parametrize("method", HAPPY_PATHS)
def test_every_method_reports_its_defining_step_from_its_prediction(method):
    build, outputs, _ = HAPPY_PATHS[method]
    program = build(OverlapRetriever())
    prediction, _ = run(program, outputs)
    assert program.behaviour(QUESTION, prediction) == pytest.approx(BEHAVIOUR[method])


# Each method's defining step skipped, as a prediction: no rephrasing, the question restated as its one
# sub-question or step-back question, no hypothetical passage, the answer stated before any step retrieval, no
# node checked, no draft step, no retrieval.
SKIPPED = {
    "multi-query": dspy.Prediction(queries=[QUESTION]),
    "rag-fusion": dspy.Prediction(queries=[QUESTION]),
    "decompose-recursive": dspy.Prediction(sub_questions=[QUESTION]),
    "decompose-individual": dspy.Prediction(sub_questions=["Who directed Doctor Strange?"]),  # one is a rewrite
    "step-back": dspy.Prediction(step_back_question=QUESTION),
    "hyde": dspy.Prediction(hypothetical_passage=""),
    "ircot": dspy.Prediction(reasoning=["So the answer is: Denver."], queries=[QUESTION]),
    "search-chain": dspy.Prediction(chain=[], replans=0),
    "rat": dspy.Prediction(draft=[], revised_steps=[]),
    "self-rag": dspy.Prediction(retrieved=False),
}


@pytest.mark.parametrize("method", SKIPPED)
def test_a_trace_demonstrates_a_multi_hop_question_only_when_the_method_took_its_defining_step(method):
    build, outputs, _ = HAPPY_PATHS[method]
    program = build(OverlapRetriever())
    prediction, _ = run(program, outputs)
    bridge = dspy.Example(question=QUESTION, type="bridge")
    assert program.demonstrates(bridge, prediction)
    assert not program.demonstrates(bridge, SKIPPED[method])


@pytest.mark.parametrize("method", ["decompose-recursive", "decompose-individual", "ircot"])
def test_a_single_hop_question_may_be_demonstrated_without_the_multi_hop_step(method):
    program = HAPPY_PATHS[method][0](OverlapRetriever())
    single = dspy.Example(question=QUESTION, type="single-hop (NQ-open)")
    assert program.demonstrates(single, SKIPPED[method])
