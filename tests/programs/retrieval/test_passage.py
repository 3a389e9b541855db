"""Post-processing a ranked list: most relevant last, a token budget, merging rankings by rank."""

from ragscale.programs.retrieval import Passage, format_passage, most_relevant_last, trim_to_budget


def ranking(*ids: str) -> list[Passage]:
    return [Passage(id=i, title=f"T{i}", text=f"text {i}") for i in ids]


def test_most_relevant_last_reverses_a_most_relevant_first_list():
    assert [p.id for p in most_relevant_last(ranking("best", "mid", "worst"))] == ["worst", "mid", "best"]


def test_trim_to_budget_keeps_passages_until_the_token_budget_is_spent():
    passages = ranking("a", "b", "c")  # each formats to "Tx: text x" = 3 words
    words = lambda text: len(text.split())  # noqa: E731
    assert [p.id for p in trim_to_budget(passages, 7, words)] == ["a", "b"]
    assert trim_to_budget(passages, 2, words) == []
    assert format_passage(passages[0]) == "Ta: text a"
