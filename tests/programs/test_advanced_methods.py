"""Control flow of the query-transformation, multi-step and self-reflective methods with a scripted DummyLM
(ChatAdapter format) over a 12-passage corpus.

Each test scripts the LM's replies in call order and asserts the steps the method took: the queries sent to
the retriever, what each predictor saw, and when the loops stopped. ``len(lm.history)`` checks that the
method made exactly the scripted calls.
"""

import copy
import itertools
import re

import dspy
import pytest
from dspy.utils import DummyLM

from ragscale.programs.crag import CRAG
from ragscale.programs.decompose_individual import DecomposeIndividual
from ragscale.programs.decompose_recursive import DecomposeRecursive
from ragscale.programs.hyde import HyDE
from ragscale.programs.ircot import IRCoT
from ragscale.programs.multi_query import MultiQuery
from ragscale.programs.rag_fusion import RAGFusion
from ragscale.programs.rat import RAT
from ragscale.programs.retrieval import BM25Retriever, HybridRetriever, Passage, format_passage, rrf
from ragscale.programs.search_chain import SearchChain
from ragscale.programs.self_rag import SelfRAG
from ragscale.programs.step_back import StepBackRAG

QUESTION = "Where was the director of Doctor Strange born?"
CORPUS = [
    {"id": f"p{i}", "title": title, "text": text}
    for i, (title, text) in enumerate(
        [
            ("Scott Derrickson", "Scott Derrickson is an American director born in Denver."),
            ("Ed Wood", "Ed Wood was an American filmmaker and actor."),
            ("Doctor Strange (film)", "Doctor Strange is a 2016 film directed by Scott Derrickson."),
            ("Denver", "Denver is the capital of Colorado."),
            ("Colorado", "Colorado is a state in the western United States."),
            ("Eiffel Tower", "The Eiffel Tower in Paris was completed in 1889."),
            ("Paris", "Paris is the capital of France."),
            ("Gustave Eiffel", "Gustave Eiffel was a French engineer whose company built the tower."),
            ("Laleli Mosque", "The Laleli Mosque is a mosque in Istanbul."),
            ("Esma Sultan Mansion", "The Esma Sultan Mansion is a palace in Ortakoy, Istanbul."),
            ("Istanbul", "Istanbul is the largest city of Turkey."),
            ("Bosphorus", "The Bosphorus is a strait that runs through Istanbul."),
        ]
    )
]
IDS = {entry["id"] for entry in CORPUS}


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


class OverlapRetriever:
    """Ranks the corpus by words shared with the query (ties in corpus order) and records every call."""

    def __init__(self, corpus=CORPUS):
        self.passages = [Passage(e["id"], e["title"], e["text"]) for e in corpus]
        self.calls: list[tuple[str, int]] = []
        self.results: list[list[Passage]] = []

    def __call__(self, query: str, k: int) -> list[Passage]:
        scored = [(len(words(query) & words(f"{p.title} {p.text}")), -i, p) for i, p in enumerate(self.passages)]
        ranked = [Passage(p.id, p.title, p.text, float(s)) for s, _, p in sorted(scored, reverse=True)][:k]
        self.calls.append((query, k))
        self.results.append(ranked)
        return ranked

    def __deepcopy__(self, memo):
        return self

    @property
    def queries(self) -> list[str]:
        return [query for query, _ in self.calls]


def run(program: dspy.Module, outputs: list[dict], question: str = QUESTION) -> tuple[dspy.Prediction, DummyLM]:
    lm = DummyLM(outputs)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        prediction = program(question=question)
    assert len(lm.history) == len(outputs), "the method made other LM calls than the scripted ones"
    return prediction, lm


def prompt(lm: DummyLM, call: int) -> str:
    """The user message of one LM call: the inputs the predictor saw."""
    return lm.history[call]["messages"][-1]["content"]


def ids(prediction: dspy.Prediction) -> list[str]:
    return [p["id"] for p in prediction.passages]


# One successful run per method: (factory, scripted replies, predictor names in the order they are declared).
HAPPY_PATHS = {
    "multi-query": (
        lambda r: MultiQuery(r, k=3, n_queries=2),
        [{"queries": ["Doctor Strange director", "Scott Derrickson birthplace"]}, {"answer": "Denver"}],
        ["rephrase", "answer"],
    ),
    "rag-fusion": (
        lambda r: RAGFusion(r, k=3, n_queries=2),
        [{"queries": ["Doctor Strange director", "Scott Derrickson birthplace"]}, {"answer": "Denver"}],
        ["rephrase", "answer"],
    ),
    "decompose-recursive": (
        lambda r: DecomposeRecursive(r, k=2),
        [
            {"sub_questions": ["Who directed Doctor Strange?", "Where was Scott Derrickson born?"]},
            {"answer": "Scott Derrickson"},
            {"answer": "Denver"},
            {"answer": "Denver"},
        ],
        ["decompose", "answer"],
    ),
    "decompose-individual": (
        lambda r: DecomposeIndividual(r, k=2),
        [
            {"sub_questions": ["Who directed Doctor Strange?", "Where was Scott Derrickson born?"]},
            {"answer": "Scott Derrickson"},
            {"answer": "Denver"},
            {"answer": "Denver"},
        ],
        ["decompose", "answer_sub", "synthesize"],
    ),
    "step-back": (
        lambda r: StepBackRAG(r, k=2),
        [{"step_back_question": "What is the history of Colorado and Denver?"}, {"answer": "Denver"}],
        ["step_back", "answer"],
    ),
    "hyde": (
        lambda r: HyDE(r, k=2),
        [{"passage": "Scott Derrickson, director of Doctor Strange, was born in Denver."}, {"answer": "Denver"}],
        ["hypothesize", "answer"],
    ),
    "ircot": (
        lambda r: IRCoT(r, k=2, max_steps=3),
        [
            {"next_sentence": "Doctor Strange was directed by Scott Derrickson."},
            {"next_sentence": "Scott Derrickson was born in Denver, so the answer is Denver."},
            {"answer": "Denver"},
        ],
        ["reason", "answer"],
    ),
    "search-chain": (
        lambda r: SearchChain(r, k=2),
        [
            {
                "queries": ["Who directed Doctor Strange?", "Where was Scott Derrickson born?"],
                "answers": ["Scott Derrickson", "Los Angeles"],
            },
            {"supported": True, "answer": "Scott Derrickson"},
            {"supported": False, "answer": "Denver"},
            {"queries": [], "answers": []},
            {"answer": "Denver"},
        ],
        ["plan", "verify", "replan", "answer"],
    ),
    "rat": (
        lambda r: RAT(r, k=2, max_steps=2),
        [
            {"steps": ["Doctor Strange was directed by Scott Derrickson.", "He was born in Los Angeles.", "Extra."]},
            {"query": "Doctor Strange director"},
            {"revised_step": "Doctor Strange was directed by Scott Derrickson."},
            {"query": "Scott Derrickson birthplace"},
            {"revised_step": "Scott Derrickson was born in Denver."},
            {"answer": "Denver"},
        ],
        ["draft", "write_query", "revise", "answer"],
    ),
    "crag": (
        lambda r: CRAG(r, k=3),
        [{"grade": "relevant"}, {"grade": "irrelevant"}, {"grade": "ambiguous"}, {"answer": "Denver"}],
        ["grade", "rewrite", "answer"],
    ),
    "self-rag": (
        lambda r: SelfRAG(r, k=2),
        [
            {"needs_retrieval": True},
            {"grade": "relevant"},
            {"grade": "irrelevant"},
            {"answer": "Denver"},
            {"support": "fully"},
            {"usefulness": 5},
        ],
        ["decide", "grade", "answer", "check_support", "rate", "rewrite", "answer_directly"],
    ),
}


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


def test_multi_query_retrieves_for_the_question_and_each_rephrasing_and_unites_without_repeats():
    retriever = OverlapRetriever()
    replies = [{"queries": ["Doctor Strange director", "Scott Derrickson birthplace", "cut"]}, {"answer": "Denver"}]
    prediction, _ = run(MultiQuery(retriever, k=3, n_queries=2), replies)
    assert prediction.queries == [QUESTION, "Doctor Strange director", "Scott Derrickson birthplace"]
    assert retriever.calls == [(query, 3) for query in prediction.queries]
    assert set(ids(prediction)) == {p.id for ranking in retriever.results for p in ranking}


def test_rag_fusion_answers_from_the_top_k_of_the_fused_rankings_most_relevant_last():
    retriever = OverlapRetriever()
    prediction, lm = run(RAGFusion(retriever, k=3, n_queries=2), HAPPY_PATHS["rag-fusion"][1])
    assert [k for _, k in retriever.calls] == [6, 6, 6]  # each ranking goes 2k deep before fusion
    fused = rrf(retriever.results)[:3]
    assert ids(prediction) == [p.id for p in reversed(fused)]
    assert prompt(lm, 1).index(format_passage(fused[0])) > prompt(lm, 1).index(format_passage(fused[2]))


def test_decompose_recursive_shows_each_sub_question_the_earlier_pairs_and_answers_the_question_last():
    retriever = OverlapRetriever()
    prediction, lm = run(DecomposeRecursive(retriever, k=2), HAPPY_PATHS["decompose-recursive"][1])
    assert prediction.sub_questions == ["Who directed Doctor Strange?", "Where was Scott Derrickson born?"]
    assert prediction.intermediate_answers == ["Scott Derrickson", "Denver"]
    assert retriever.queries == [*prediction.sub_questions, QUESTION]
    first_pair = "Q: Who directed Doctor Strange? A: Scott Derrickson"
    assert first_pair not in prompt(lm, 1)
    assert first_pair in prompt(lm, 2)
    assert "Q: Where was Scott Derrickson born? A: Denver" in prompt(lm, 3)


def test_decompose_individual_answers_sub_questions_alone_and_synthesizes_from_all_pairs():
    retriever = OverlapRetriever()
    prediction, lm = run(DecomposeIndividual(retriever, k=2), HAPPY_PATHS["decompose-individual"][1])
    assert prediction.intermediate_answers == ["Scott Derrickson", "Denver"]
    assert retriever.queries == prediction.sub_questions
    assert "A: Scott Derrickson" not in prompt(lm, 2)
    synthesis = prompt(lm, 3)
    assert "Q: Who directed Doctor Strange? A: Scott Derrickson" in synthesis
    assert "Q: Where was Scott Derrickson born? A: Denver" in synthesis


def test_decompose_individual_answers_the_question_itself_when_no_sub_question_is_written():
    retriever = OverlapRetriever()
    replies = [{"sub_questions": []}, {"answer": "Denver"}, {"answer": "Denver"}]
    prediction, _ = run(DecomposeIndividual(retriever, k=2), replies)
    assert prediction.sub_questions == [QUESTION]
    assert retriever.queries == [QUESTION]


def test_step_back_retrieves_for_both_questions_and_answers_from_both_contexts_the_question_own_last():
    retriever = OverlapRetriever()
    prediction, lm = run(StepBackRAG(retriever, k=2), HAPPY_PATHS["step-back"][1])
    assert prediction.step_back_question == "What is the history of Colorado and Denver?"
    assert retriever.queries == [QUESTION, prediction.step_back_question]
    own, background = retriever.results
    assert not {p.id for p in own} & {p.id for p in background}
    shown = [prompt(lm, 1).index(format_passage(p)) for p in [background[1], background[0], own[1], own[0]]]
    assert shown == sorted(shown)
    assert set(ids(prediction)) == {p.id for p in [*own, *background]}


def test_step_back_shows_a_passage_found_for_both_questions_once_among_the_question_own():
    retriever = OverlapRetriever()
    replies = [{"step_back_question": "Who is Scott Derrickson, the director?"}, {"answer": "Denver"}]
    prediction, lm = run(StepBackRAG(retriever, k=2), replies)
    own, background = retriever.results
    shared = {p.id for p in own} & {p.id for p in background}
    assert shared
    shown = prompt(lm, 1)
    for passage in own:
        assert shown.count(format_passage(passage)) == 1
    assert len(ids(prediction)) == len(set(ids(prediction)))


def test_hyde_searches_with_the_hypothetical_passage_not_the_question():
    retriever = OverlapRetriever()
    prediction, _ = run(HyDE(retriever, k=2), HAPPY_PATHS["hyde"][1])
    assert retriever.queries == [prediction.hypothetical_passage]
    assert prediction.hypothetical_passage.startswith("Scott Derrickson")


def test_hyde_uses_only_the_dense_side_of_a_hybrid_retriever():
    dense, bm25 = OverlapRetriever(), OverlapRetriever()
    prediction, _ = run(HyDE(HybridRetriever(dense, bm25), k=2), HAPPY_PATHS["hyde"][1])
    assert dense.calls == [(prediction.hypothetical_passage, 2)]
    assert bm25.calls == []


def test_ircot_stops_reasoning_at_the_sentence_that_gives_the_answer():
    retriever = OverlapRetriever()
    prediction, _ = run(IRCoT(retriever, k=2, max_steps=3), HAPPY_PATHS["ircot"][1])
    assert len(prediction.reasoning) == 2
    assert prediction.queries == [QUESTION, "Doctor Strange was directed by Scott Derrickson."]
    assert retriever.queries == prediction.queries  # no retrieval after the answer sentence


def test_ircot_stops_at_the_step_cap_and_keeps_at_most_max_passages():
    retriever = OverlapRetriever()
    replies = [{"next_sentence": s} for s in ("Doctor Strange is a film.", "Ed Wood was an actor.", "Paris.")]
    prediction, lm = run(IRCoT(retriever, k=3, max_steps=3, max_passages=4), [*replies, {"answer": "Denver"}])
    assert len(prediction.reasoning) == 3
    assert len(retriever.calls) == 4  # the question, then one query per sentence
    assert len(prediction.passages) == 4
    assert "Ed Wood was an actor." in prompt(lm, 2)  # each step sees the sentences so far


def test_ircot_appends_each_steps_passages_so_every_prompt_extends_the_last_ones_documents():
    program = IRCoT(OverlapRetriever(), k=2, max_steps=3)
    seen, reason = [], program.reason
    program.reason = lambda **inputs: seen.append(inputs["documents"]) or reason(**inputs)
    replies = [{"next_sentence": s} for s in ("Doctor Strange is a film.", "Ed Wood was an actor.", "Paris.")]
    prediction, _ = run(program, [*replies, {"answer": "Denver"}])
    assert len(seen) == 3 and len(seen[-1]) > len(seen[0])
    for before, after in itertools.pairwise(seen):
        assert after[: len(before)] == before  # the earlier documents, in the same order, come first
    titles = [p["title"] for p in prediction.passages]  # the reader gets the whole collection, in that order
    assert titles[: len(seen[-1])] == [document.split(":")[0] for document in seen[-1]]


def test_search_chain_keeps_supported_nodes_corrects_the_contradicted_one_and_replans():
    retriever = OverlapRetriever()
    prediction, lm = run(SearchChain(retriever, k=2), HAPPY_PATHS["search-chain"][1])
    assert [node["supported"] for node in prediction.chain] == [True, False]
    assert [node["answer"] for node in prediction.chain] == ["Scott Derrickson", "Denver"]
    assert prediction.chain[1]["expected"] == "Los Angeles"
    assert prediction.replans == 1
    assert "checked" not in prompt(lm, 0).lower()  # the first plan sees the question alone, no empty list to copy
    assert "Where was Scott Derrickson born? -> Denver" in prompt(lm, 3)  # the re-plan sees the correction
    assert "Where was Scott Derrickson born? -> Denver" in prompt(lm, 4)  # so does the final answer
    assert retriever.queries == ["Who directed Doctor Strange?", "Where was Scott Derrickson born?"]


def test_search_chain_stops_replanning_at_the_cap():
    retriever = OverlapRetriever()
    replies = [
        {"queries": ["Who directed Doctor Strange?", "Where was he born?"], "answers": ["Ed Wood", "Boston"]},
        {"supported": False, "answer": "Scott Derrickson"},
        {"queries": ["Where was Scott Derrickson born?"], "answers": ["Boston"]},
        {"supported": False, "answer": "Denver"},
        {"answer": "Denver"},
    ]
    prediction, _ = run(SearchChain(retriever, k=2, max_replans=1), replies)
    assert prediction.replans == 1
    assert retriever.queries == ["Who directed Doctor Strange?", "Where was Scott Derrickson born?"]
    assert [node["answer"] for node in prediction.chain] == ["Scott Derrickson", "Denver"]


def test_search_chain_stops_at_max_nodes_and_expects_unknown_where_the_plan_gave_no_answer():
    replies = [{"queries": ["Doctor Strange", "Denver", "Paris"], "answers": ["film"]}]
    replies += [{"supported": True, "answer": "film"}, {"supported": True, "answer": "city"}, {"answer": "Denver"}]
    prediction, _ = run(SearchChain(OverlapRetriever(), k=2, max_nodes=2), replies)
    assert [node["expected"] for node in prediction.chain] == ["film", "unknown"]


def test_search_chain_answers_from_at_most_max_passages():
    replies = [{"queries": ["Eiffel", "Istanbul"], "answers": ["tower", "city"]}]
    replies += [{"supported": True, "answer": "tower"}, {"supported": True, "answer": "city"}, {"answer": "Paris"}]
    program = SearchChain(OverlapRetriever(), k=2, max_passages=3)
    prediction, lm = run(program, replies)
    kept = {p["title"] for p in prediction.passages}
    assert len(kept) == 3
    retrieved = {p.title for ranking in program.retriever.results for p in ranking}
    assert len(retrieved) == 4  # the fourth, least relevant one is left out of the answer's prompt
    assert all((title in prompt(lm, 3)) == (title in kept) for title in retrieved)
    assert program.max_documents() == {"verify": 2, "answer": 3}


def test_rat_writes_a_query_and_revises_each_draft_step_then_answers_from_the_revised_chain():
    retriever = OverlapRetriever()
    prediction, lm = run(RAT(retriever, k=2, max_steps=2), HAPPY_PATHS["rat"][1])
    assert len(prediction.draft) == 2  # capped at max_steps
    assert prediction.queries == ["Doctor Strange director", "Scott Derrickson birthplace"]
    assert retriever.queries == prediction.queries
    assert prediction.revised_steps[-1] == "Scott Derrickson was born in Denver."
    assert "He was born in Los Angeles." in prompt(lm, 3)  # the second query is written for the draft step
    assert "Scott Derrickson was born in Denver." in prompt(lm, 5)
    assert "He was born in Los Angeles." not in prompt(lm, 5)  # the answer reads the revised chain


def test_crag_keeps_only_the_relevant_passages_when_one_is_relevant():
    retriever = OverlapRetriever()
    prediction, _ = run(CRAG(retriever, k=3), HAPPY_PATHS["crag"][1])
    assert prediction.action == "correct"
    assert prediction.rewritten_query is None
    assert ids(prediction) == [retriever.results[0][0].id]
    assert [g["grade"] for g in prediction.grades] == ["relevant", "irrelevant", "ambiguous"]
    assert [g["id"] for g in prediction.grades] == [p.id for p in retriever.results[0]]
    assert len(retriever.calls) == 1


def test_crag_rewrites_and_searches_the_fallback_when_every_passage_is_irrelevant():
    retriever, fallback = OverlapRetriever(), BM25Retriever(CORPUS)
    replies = [{"grade": "irrelevant"}] * 3 + [{"query": "capital of Colorado state"}, {"answer": "Denver"}]
    prediction, lm = run(CRAG(retriever, k=3, fallback=fallback), replies)
    assert prediction.action == "incorrect"
    assert prediction.rewritten_query == "capital of Colorado state"
    graded = {p.id for p in retriever.results[0]}
    found = [p.id for p in fallback("capital of Colorado state", 9) if p.id not in graded]
    assert found and sorted(ids(prediction)) == sorted(found[:3])
    assert len(retriever.calls) == 1  # the second search went to the fallback
    assert "Colorado is a state" in prompt(lm, 4)


def test_crag_keeps_ambiguous_passages_beside_a_wider_search_of_the_same_retriever():
    retriever = OverlapRetriever()
    replies = [{"grade": "ambiguous"}, {"grade": "irrelevant"}, {"grade": "irrelevant"}]
    prediction, _ = run(CRAG(retriever, k=3), [*replies, {"query": "Scott Derrickson Denver"}, {"answer": "Denver"}])
    assert prediction.action == "ambiguous"
    assert retriever.calls[1] == ("Scott Derrickson Denver", 9)
    assert ids(prediction)[-1] == retriever.results[0][0].id  # the ambiguous passage, closest to the question
    irrelevant = {p.id for p in retriever.results[0][1:]}
    assert not irrelevant & set(ids(prediction))
    assert len(prediction.passages) == 4  # the ambiguous one and k new ones


def test_self_rag_answers_without_retrieval_when_it_decides_none_is_needed():
    retriever = OverlapRetriever()
    prediction, _ = run(SelfRAG(retriever), [{"needs_retrieval": False}, {"answer": "Paris"}])
    assert prediction.answer == "Paris"
    assert prediction.retrieved is False
    assert retriever.calls == []
    assert prediction.passages == []


def test_self_rag_stops_after_a_fully_supported_useful_answer():
    retriever = OverlapRetriever()
    prediction, _ = run(SelfRAG(retriever, k=2, max_rounds=3), HAPPY_PATHS["self-rag"][1])
    assert len(prediction.rounds) == 1
    assert [g["grade"] for g in prediction.rounds[0]["grades"]] == ["relevant", "irrelevant"]
    assert [g["id"] for g in prediction.rounds[0]["grades"]] == [p.id for p in retriever.results[0]]
    assert ids(prediction) == [retriever.results[0][0].id]  # only the relevant passage


def test_self_rag_retries_with_a_rewritten_query_and_keeps_the_best_supported_round():
    retriever = OverlapRetriever()
    replies = [
        {"needs_retrieval": True},
        {"grade": "relevant"},
        {"grade": "relevant"},
        {"answer": "Denver"},
        {"support": "fully"},
        {"usefulness": 2},
        {"query": "Scott Derrickson birthplace"},
        {"grade": "relevant"},
        {"grade": "irrelevant"},
        {"answer": "Los Angeles"},
        {"support": "partially"},
        {"usefulness": 5},
    ]
    prediction, lm = run(SelfRAG(retriever, k=2, max_rounds=2), replies)
    assert retriever.queries == [QUESTION, "Scott Derrickson birthplace"]
    assert QUESTION in prompt(lm, 6)  # the rewrite sees the query that failed
    assert [r["support"] for r in prediction.rounds] == ["fully", "partially"]
    assert prediction.answer == "Denver"


def test_self_rag_answers_directly_when_no_round_finds_a_relevant_passage():
    retriever = OverlapRetriever()
    replies = [{"needs_retrieval": True}, {"grade": "irrelevant"}, {"grade": "irrelevant"}]
    replies += [{"query": "Scott Derrickson"}, {"grade": "irrelevant"}, {"grade": "irrelevant"}, {"answer": "Denver"}]
    prediction, _ = run(SelfRAG(retriever, k=2, max_rounds=2), replies)
    assert prediction.retrieved is True
    assert [r["answer"] for r in prediction.rounds] == [None, None]
    assert prediction.passages == []


# --- compiling ---------------------------------------------------------------------------------------------------

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
        build(retriever), TRAINSET, optimizer="bootstrap", metric=em_metric, max_demos=1, max_docs_per_demo=2, lm=lm
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
    compiled = compile_program(program, TRAINSET, optimizer="labeled", metric=em_metric, max_demos=1)
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


def test_behaviour_sees_a_skipped_step_crag_correcting_self_rag_not_retrieving_step_back_repeating():
    crag, _ = run(CRAG(OverlapRetriever(), k=2), [{"grade": "irrelevant"}] * 2 + [{"query": "q"}, {"answer": "x"}])
    assert CRAG.behaviour(QUESTION, crag)["corrective_rate"] == 1.0
    self_rag, _ = run(SelfRAG(OverlapRetriever()), [{"needs_retrieval": False}, {"answer": "Denver"}])
    assert SelfRAG.behaviour(QUESTION, self_rag)["retrieval_rate"] == 0.0
    same, _ = run(StepBackRAG(OverlapRetriever(), k=2), [{"step_back_question": QUESTION.upper()}, {"answer": "x"}])
    assert StepBackRAG.behaviour(QUESTION, same) == {"step_back_rate": 0.0}
