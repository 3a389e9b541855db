"""The method contract: every registered method is a ``Method`` under its own name and declares what the rest of
ragscale asks of it, and no code outside ``programs/`` decides anything by a method's name."""

import ast
from pathlib import Path

import dspy
import pytest

from ragscale.programs import PROGRAMS, build_program, method_named
from ragscale.programs.base import Method
from ragscale.programs.closed_book import ClosedBook
from ragscale.programs.drag import DRAG
from ragscale.programs.iterdrag import IterDRAG
from ragscale.programs.rag import RAG

REPO = Path(__file__).resolve().parents[2]
CLAIMS = REPO / "experiments" / "sweep" / "claims.py"  # the sweep's claims name the paper's methods they compare


def test_every_registered_method_is_a_method_under_its_own_name():
    assert PROGRAMS and all(issubclass(cls, Method) and cls.name == name for name, cls in PROGRAMS.items())


def test_the_papers_methods_declare_what_sets_them_apart():
    assert (ClosedBook.retrieves, RAG.retrieves, DRAG.retrieves, IterDRAG.retrieves) == (False, True, True, True)
    assert [name for name, cls in PROGRAMS.items() if cls.iterates] == ["iterdrag"]
    assert (RAG.demo_documents, DRAG.demo_documents, IterDRAG.demo_documents) == (False, True, True)


def test_iterdrag_declares_the_count_that_reaches_its_cap_and_the_decomposers_the_fields_a_record_keeps():
    assert {name: cls.reaches_cap for name, cls in PROGRAMS.items() if cls.reaches_cap} == {"iterdrag": "follow_ups"}
    asked = dspy.Prediction(answer="a", sub_questions=["q?"], intermediate_answers=["b"])
    assert IterDRAG.behaviour("Q?", asked)[IterDRAG.reaches_cap] == 1  # one iteration, one follow-up
    kept = {name: cls.record_fields for name, cls in PROGRAMS.items() if cls.record_fields}
    assert kept == dict.fromkeys(("iterdrag", "decompose-recursive", "decompose-individual"),
                                 ("sub_questions", "intermediate_answers"))  # fmt: skip


def test_the_defaults_of_the_contract_are_what_a_plain_retrieve_then_answer_method_needs():
    class Plain(Method):
        name = "plain"

        def __init__(self, retriever, k: int):
            super().__init__()
            self.retriever, self.k = retriever, k
            self.answer = dspy.Predict("documents, question -> answer")

    plain = Plain(retriever=None, k=4)
    assert plain.max_documents() == {"answer": 4} and plain.max_list_items() == 1
    assert (Plain.reaches_cap, Plain.record_fields) == (None, ())
    assert Plain.behaviour("q", dspy.Prediction(answer="a")) == {}
    assert plain.demonstrates(dspy.Example(question="q"), dspy.Prediction(answer="a"))
    assert ClosedBook().max_documents() == {}  # retrieves nothing: no document slot


def test_build_program_passes_iterations_only_to_a_method_that_iterates():
    iterdrag = build_program("iterdrag", None, k=2, iterations=5)
    rag = build_program("rag", None, k=2, iterations=5)
    assert (iterdrag.k, iterdrag.max_iterations, iterdrag.max_list_items()) == (2, 5, 5)
    assert (type(rag), rag.k) == (RAG, 2)
    with pytest.raises(ValueError, match="unknown method 'nope'; valid choices: closed-book, crag"):
        method_named("nope")


def _constants(node: ast.AST) -> tuple[str, list[ast.AST]] | None:
    """What a node decides by, and the expressions a method's name would be in there: a comparison's sides (``==``,
    ``in`` and ``not in`` included), a dict literal's keys, a subscript's key and a ``match`` case's value."""
    if isinstance(node, ast.Compare):
        return "compares with", [c for side in (node.left, *node.comparators) for c in ast.walk(side)]
    if isinstance(node, ast.Dict):
        return "keys a dict by", [key for key in node.keys if key is not None]
    if isinstance(node, ast.Subscript):
        return "looks up", [node.slice]
    if isinstance(node, ast.MatchValue):
        return "matches", [node.value]
    return None


def _name_branches(path: Path, root: Path = REPO) -> list[str]:
    """Decisions by a registered method's name in one source file (``_constants``): ``x == "rag"``, ``m in ("drag",
    ...)``, ``"iterdrag" in x``, ``{"iterdrag": ...}``, ``table["rag"]``, ``case "drag":``."""
    names = set(PROGRAMS)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        decided = _constants(node)
        if decided is None:
            continue
        how, constants = decided
        hits = [c.value for c in constants if isinstance(c, ast.Constant) and c.value in names]
        if hits:
            found.append(f"{path.relative_to(root)}:{node.lineno} {how} {', '.join(map(repr, hits))}")
    return found


def test_no_code_outside_programs_branches_on_a_methods_name():
    folders = ("ragscale", "process", "signatures", "optimizers", "experiments", "data")
    sources = [p for folder in folders for p in (REPO / folder).rglob("*.py")]
    assert sources
    assert [hit for path in sources if path != CLAIMS for hit in _name_branches(path)] == []


@pytest.mark.parametrize(
    ("line", "found"),
    [
        ('docs = 3 if m == "iterdrag" else 5', "demo.py:2 compares with 'iterdrag'"),
        ('asks = "iterdrag" in methods', "demo.py:2 compares with 'iterdrag'"),
        ('plain = m in ("rag", "drag")', "demo.py:2 compares with 'rag', 'drag'"),
        ('others = [m for m in M if m not in ("rag",)]', "demo.py:2 compares with 'rag'"),
        ('COUNTS = {"iterdrag": "follow_ups"}', "demo.py:2 keys a dict by 'iterdrag'"),
        ('count = COUNTS["iterdrag"]', "demo.py:2 looks up 'iterdrag'"),
        ('match m:\n    case "drag":\n        pass', "demo.py:3 matches 'drag'"),  # the case's line
    ],
)
def test_the_name_branch_check_finds_each_form_of_branch(tmp_path, line, found):
    source = tmp_path / "demo.py"
    source.write_text(f"x = 1\n{line}\n")
    assert _name_branches(source, tmp_path) == [found]


def test_the_name_branch_check_lets_a_method_name_through_where_nothing_is_decided_by_it(tmp_path):
    source = tmp_path / "demo.py"
    source.write_text('METHODS = ("rag", "drag")\nlabel = f"{m} vs rag"\nrows = {m: 1 for m in METHODS}\n')
    assert _name_branches(source, tmp_path) == []
