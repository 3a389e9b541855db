"""``import ragscale`` is the one door: every public name is there, documented, found by ``help``, and nothing heavy
loads until a name is used."""

import pydoc
import re
import subprocess
import sys

import pytest

import ragscale

METHODS = ("ClosedBook", "RAG", "DRAG", "IterDRAG", "MultiQuery", "RAGFusion", "DecomposeRecursive",
           "DecomposeIndividual", "StepBackRAG", "HyDE", "IRCoT", "SearchChain", "RAT", "CRAG", "SelfRAG")  # fmt: skip
CALLS = ("Method", "load_lm", "load_split", "load_corpus", "retriever", "compile", "evaluate", "meter", "RunConfig",
         "run", "configure", "Evaluation", "CompilationFailedError")  # fmt: skip


def test_importing_ragscale_loads_no_torch_and_no_dspy():
    code = "import ragscale, sys; print('torch' in sys.modules, 'dspy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_every_method_and_call_is_listed_in_all_and_each_has_a_docstring_of_its_own():
    assert set(METHODS) | set(CALLS) == set(ragscale.__all__)
    for name in ragscale.__all__:
        doc = (getattr(ragscale, name).__doc__ or "").strip()
        assert doc and not doc.startswith(f"{name}("), f"ragscale.{name} has no docstring (a dataclass's is made up)"


def test_every_method_is_the_registered_class_under_its_papers_name():
    from ragscale.programs import PROGRAMS

    assert {getattr(ragscale, name) for name in METHODS} == set(PROGRAMS.values())
    assert all(issubclass(getattr(ragscale, name), ragscale.Method) for name in METHODS)


def test_help_opens_with_an_index_that_names_every_public_name():
    index = ragscale.__doc__
    missing = [name for name in ragscale.__all__ if not re.search(rf"\b{name}\b", index)]
    assert not missing, f"the index in ragscale's docstring does not name {missing}"
    assert pydoc.render_doc(ragscale, renderer=pydoc.plaintext).count(index.splitlines()[0]) == 1
    assert set(ragscale.__all__) <= set(dir(ragscale))


def test_an_unknown_name_says_what_the_door_offers():
    with pytest.raises(AttributeError, match=r"no attribute 'Rag'; it offers .*DRAG.*evaluate"):
        ragscale.Rag  # noqa: B018
