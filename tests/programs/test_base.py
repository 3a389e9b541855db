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


def _name_branches(path: Path, root: Path = REPO) -> list[str]:
    """Comparisons of a registered method's name (``x == "rag"``, ``m in ("drag", ...)``) in one source file."""
    names = set(PROGRAMS)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Compare):
            continue
        constants = [c for side in (node.left, *node.comparators) for c in ast.walk(side)]
        hits = [c.value for c in constants if isinstance(c, ast.Constant) and c.value in names]
        if hits:
            found.append(f"{path.relative_to(root)}:{node.lineno} compares with {', '.join(map(repr, hits))}")
    return found


def test_no_code_outside_programs_branches_on_a_methods_name():
    sources = [
        p for folder in ("signatures", "optimizers", "experiments", "data") for p in (REPO / folder).rglob("*.py")
    ]
    assert sources
    assert [hit for path in sources if path != CLAIMS for hit in _name_branches(path)] == []


def test_the_name_branch_check_finds_a_branch(tmp_path):
    source = tmp_path / "demo.py"
    source.write_text(
        'def docs(m):\n    return 3 if m == "iterdrag" else 5\n\n\nX = [m for m in M if m not in ("rag",)]\n'
    )
    assert _name_branches(source, tmp_path) == ["demo.py:2 compares with 'iterdrag'", "demo.py:5 compares with 'rag'"]
