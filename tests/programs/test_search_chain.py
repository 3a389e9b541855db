"""Search-in-the-Chain: a planned chain of queries checked against documents, corrected and re-planned."""

from method_doubles import HAPPY_PATHS, OverlapRetriever, prompt, run

from ragscale.programs.search_chain import SearchChain


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
