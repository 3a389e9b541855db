"""Doubles for the program tests (tests/programs/): a retriever with a fixed ranking per query, one that ranks a
12-passage corpus by the words it shares with the query, and one scripted successful run per method (the LM's
replies in call order, ChatAdapter format), shared by each method's own tests and the tests over every method."""

import re

import dspy
from dspy.utils import DummyLM

from ragscale.programs.crag import CRAG
from ragscale.programs.decompose_individual import DecomposeIndividual
from ragscale.programs.decompose_recursive import DecomposeRecursive
from ragscale.programs.hyde import HyDE
from ragscale.programs.ircot import IRCoT
from ragscale.programs.multi_query import MultiQuery
from ragscale.programs.rag_fusion import RAGFusion
from ragscale.programs.rat import RAT
from ragscale.programs.retrieval import Passage
from ragscale.programs.search_chain import SearchChain
from ragscale.programs.self_rag import SelfRAG
from ragscale.programs.step_back import StepBackRAG


def passage(name: str) -> Passage:
    return Passage(id=f"id-{name}", title=name, text=f"{name} is a passage.")


class TableRetriever:
    """A test double: a fixed ranking per query (most relevant first), a default one otherwise; shared on copy."""

    def __init__(self, default: list[Passage], table: dict[str, list[Passage]] | None = None):
        self.default, self.table, self.queries = default, table or {}, []

    def __call__(self, query: str, k: int) -> list[Passage]:
        self.queries.append(query)
        return self.table.get(query, self.default)[:k]

    def __deepcopy__(self, memo):
        return self


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
