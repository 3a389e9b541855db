"""The oracle retriever: a question's own paragraphs, gold only or all, whatever k asks; nothing for other queries."""

import copy
from pathlib import Path

from ragscale.data import load_jsonl
from ragscale.experiments.oracle import OracleRetriever

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "hotpotqa_mini.jsonl"


def test_gold_only_gives_the_supporting_paragraphs_and_all_gives_every_paragraph_in_order():
    examples = load_jsonl(FIXTURE)[:3]
    gold, everything = OracleRetriever(examples, gold_only=True), OracleRetriever(examples, gold_only=False)
    for example in examples:
        supporting = [p["title"] for p in example.paragraphs if p["is_supporting"]]
        assert [p.title for p in gold(example.question, 1)] == supporting  # k does not cut the oracle
        assert [p.title for p in everything(example.question, 2)] == [p["title"] for p in example.paragraphs]
    assert gold("a sub-question nobody asked", 5) == []
    assert copy.deepcopy(gold) is gold  # shared, like every retriever, when DSPy copies a program


def test_the_two_oracle_rows_have_different_run_keys_and_other_retrievers_leave_keys_as_they_were():
    from ragscale.experiments.config import RunConfig
    from ragscale.experiments.identity import config_key

    examples = load_jsonl(FIXTURE)[:3]
    config = RunConfig(method="rag", dataset="hotpotqa", docs=20)
    gold, everything = OracleRetriever(examples, gold_only=True), OracleRetriever(examples, gold_only=False)
    keys = {config_key(config, "data", retriever=r) for r in (gold, everything, None)}
    assert len(keys) == 3
    assert config_key(config, "data", retriever=lambda query, k: []) == config_key(config, "data")


def test_distractors_pad_the_gold_paragraphs_to_k_with_the_highest_ranked_non_gold_passages():
    from ragscale.programs.retrieval import Passage

    examples = load_jsonl(FIXTURE)[:2]
    example = examples[0]
    own = [p for p in example.paragraphs if p["is_supporting"]]
    ranked = [Passage(id=f"other-{i}", title=f"other {i}", text="") for i in range(10)]

    def retriever(query, k):  # ranks one gold paragraph first: the oracle must not show it twice
        gold = OracleRetriever(examples, gold_only=True)(query, 1)[0]
        return [gold, *ranked][:k]

    oracle = OracleRetriever(examples, gold_only=True, distractors=retriever)
    got = oracle(example.question, 5)
    assert [p.title for p in got[: len(own)]] == [p["title"] for p in own]
    assert [p.id for p in got[len(own) :]] == [f"other-{i}" for i in range(5 - len(own))]
    assert len(oracle(example.question, 1)) == len(own)  # never fewer than the gold paragraphs
    assert oracle("a sub-question nobody asked", 5) == []
    assert oracle.identity == "oracle-distractors"


def test_distractors_pad_only_the_gold_paragraphs():
    import pytest

    with pytest.raises(ValueError, match="gold_only=True"):
        OracleRetriever(load_jsonl(FIXTURE)[:1], gold_only=False, distractors=lambda query, k: [])
