"""An import sits at the top of its module, unless putting it off keeps a heavy library out of the process.

An import inside a function is one reason away from the top: the module it names loads, when imported, a library of
``HEAVY`` that the importing module does not already load at its own import. "Loads at import" follows top-level
imports: a module loads what its top-level imports load, and importing ``a.b.c`` imports the packages ``a.b`` and
``a`` first. An import under ``if TYPE_CHECKING:`` loads nothing. So ``import ragscale`` loads neither torch nor
DSPy, the command line's ``--help`` answers without torch or MLflow, and a lazy standard-library import, or a lazy
import of a module no heavier than its importer, has no reason and moves to the top.
"""

import ast
from pathlib import Path

import pytest
import test_layout
from test_layout import _imported, _sources

HEAVY = frozenset({
    "torch", "transformers", "sentence_transformers", "chromadb", "mlflow", "dspy", "litellm", "datasets",
    "matplotlib", "optuna", "pandas", "rapidocr_onnxruntime", "torch._inductor",
})  # fmt: skip
"""The libraries that take a second or more to import (numpy, pypdf, pdfplumber, gguf, rank_bm25, onnxruntime and
psutil take less, and are imported at the top like the standard library). An entry names a module and everything
under it, so a dotted one is a submodule heavy of its own: ``torch._inductor`` (the compiler) takes about 1.5 s and
800 modules more than ``import torch``, and a module that loads torch may still put it off."""


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and (
        getattr(node.test, "id", None) == "TYPE_CHECKING" or getattr(node.test, "attr", None) == "TYPE_CHECKING"
    )


def _split(tree: ast.Module, modules: dict[str, Path]) -> tuple[set[str], list[tuple[int, str, list[str]]]]:
    """A module's top-level imports (the modules they name) and its imports inside functions (line, statement, the
    modules it names); those under ``if TYPE_CHECKING:`` are neither."""
    top: set[str] = set()
    inner: list[tuple[int, str, list[str]]] = []

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if _type_checking(child):
                for branch in child.orelse:  # the else branch runs
                    walk(ast.Module(body=[branch], type_ignores=[]), in_function)
                continue
            if names := _imported(child, modules):
                if in_function:
                    inner.append((child.lineno, ast.unparse(child), names))
                else:
                    top.update(names)
            walk(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda))

    walk(tree, False)
    return top, inner


def _module(name: str, modules: dict[str, Path]) -> str:
    """A ragscale name's module: the longest prefix that is one (``ragscale.programs.lm.load_lm`` is in
    ``ragscale.programs.lm``); another library's name stays as it is."""
    while name.startswith("ragscale.") and name not in modules:
        name = name.rsplit(".", 1)[0]
    return name


def _heavy(name: str) -> set[str]:
    """The ``HEAVY`` entries that importing another library's module ``name`` loads: those it is or is under
    (``torch._inductor.config`` loads ``torch`` and ``torch._inductor``)."""
    return {entry for entry in HEAVY if name == entry or name.startswith(f"{entry}.")}


def _heavy_at_import(name: str, top: dict[str, set[str]], modules: dict[str, Path]) -> set[str]:
    """The ``HEAVY`` libraries that importing ``name`` loads: through its packages and top-level imports."""
    found, seen, todo = set(), set(), [name]
    while todo:
        current = _module(todo.pop(), modules)
        if current in seen:
            continue
        seen.add(current)
        if current.split(".")[0] != "ragscale":
            found |= _heavy(current)
            continue
        todo.extend(current.rsplit(".", depth)[0] for depth in range(1, current.count(".") + 1))  # its packages
        todo.extend(top.get(current, ()))
    return found


def _needless_lazy_imports() -> list[str]:
    """``file:line statement`` for every import inside a function that puts off no heavy library."""
    modules = _sources()
    trees = {name: ast.parse(path.read_text(encoding="utf-8"), filename=str(path)) for name, path in modules.items()}
    split = {name: _split(tree, modules) for name, tree in trees.items()}
    top = {name: imports for name, (imports, _) in split.items()}
    needless = []
    for name, (_, inner) in split.items():
        own = _heavy_at_import(name, top, modules)
        for line, statement, imported in inner:
            if not any(_heavy_at_import(target, top, modules) - own for target in imported):
                needless.append(f"{modules[name].relative_to(test_layout.REPO).as_posix()}:{line} {statement}")
    return sorted(needless, key=lambda entry: (entry.split(":")[0], int(entry.split(":")[1].split()[0])))


def test_an_import_sits_inside_a_function_only_to_put_off_a_heavy_library_its_module_does_not_load():
    needless = _needless_lazy_imports()
    assert not needless, "these imports put off no heavy library: move them to the top\n" + "\n".join(needless)


@pytest.fixture
def tree(tmp_path, monkeypatch):
    for folder in test_layout.SOURCE_ROOTS:
        (tmp_path / folder).mkdir()
    monkeypatch.setattr(test_layout, "REPO", tmp_path)
    return tmp_path


def test_the_import_check_lets_a_function_put_off_a_module_that_loads_a_heavy_library_through_others(tree):
    (tree / "programs" / "__init__.py").write_text("import dspy\n")
    (tree / "programs" / "rag.py").write_text("from ragscale.signatures.ask import Ask\n")
    (tree / "signatures" / "ask.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n"
    )
    (tree / "data" / "files.py").write_text("def f():\n    from ragscale.programs.rag import x\n")
    (tree / "experiments" / "plot.py").write_text("def f():\n    import matplotlib.pyplot as plt\n")
    assert _needless_lazy_imports() == []


def test_the_import_check_catches_a_lazy_import_that_puts_off_nothing_heavy(tree):
    (tree / "signatures" / "ask.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n"
    )
    (tree / "programs" / "rag.py").write_text("import dspy\n\ndef f():\n    from ragscale.programs.base import x\n")
    (tree / "programs" / "base.py").write_text("import dspy\n")
    (tree / "data" / "files.py").write_text(
        "def f():\n    import json\n    import numpy\n    from ragscale.signatures.ask import Ask\n"
    )
    assert _needless_lazy_imports() == [
        "data/files.py:2 import json",
        "data/files.py:3 import numpy",
        "data/files.py:4 from ragscale.signatures.ask import Ask",
        "programs/rag.py:4 from ragscale.programs.base import x",
    ]


def test_the_import_check_counts_a_dotted_heavy_entry_as_a_library_of_its_own(tree):
    (tree / "programs" / "step.py").write_text(
        "import torch\n\ndef f():\n    from torch._inductor import config\n\ndef g():\n    import torch.nn\n"
    )
    (tree / "programs" / "plain.py").write_text("def f():\n    import torch._inductor.config\n")
    assert _needless_lazy_imports() == ["programs/step.py:7 import torch.nn"]
