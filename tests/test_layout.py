"""The layout holds: every source package ships in the wheel, imports flow one way, nothing imports in a cycle.

The folders are layers. ``process`` is the bottom one: how a process is set up (the offline environment, the C
heap, OpenMP's threads, logging), which every folder may import and which imports only itself. Above it,
dependencies flow `signatures <- programs <- optimizers <- experiments`, and `experiments -> data`: a folder may
import its own modules, those of the folders to its left and ``process``; `data` imports only itself and
``process``; nothing but `experiments`, ``published`` and the door imports `experiments`. ``published`` (results
committed under ``benchmarks/results/`` and the docs pages made from them) sits above `experiments`: it may import
every layer but the door, and nothing imports it but the benchmarks' scripts and the tests, which are no layer. The
door, ``ragscale/`` (``import ragscale``: the Python API), may import every layer but ``published``, and no layer
imports it. Inside `experiments` no module imports back up (``EXPERIMENTS_MAY_IMPORT``): its own modules (config,
runner, evaluate, tracking, compare, ...) import no sub-package of it; the sweep and the document collections import
those and themselves, not each other; the command line, ``cli``, may import them all. There is no exception to these
rules. Imports are read from the sources (every `import` statement, those inside functions included), so a lazy
import cannot hide a wrong direction or a cycle.
"""

import ast
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOOR = "ragscale"
"""The folder of ``import ragscale`` itself: the Python API, above every layer, which no layer imports."""
PUBLISHED = "published"
"""The folder of published results and the pages made from them, above `experiments`; no layer imports it."""
SOURCE_ROOTS = ("process", "signatures", "programs", "optimizers", "experiments", "data", PUBLISHED, DOOR)
MAY_IMPORT = {
    DOOR: {"process", "signatures", "programs", "optimizers", "experiments", "data", DOOR},
    PUBLISHED: {"process", "signatures", "programs", "optimizers", "experiments", "data", PUBLISHED},
    "process": {"process"},
    "signatures": {"process", "signatures"},
    "programs": {"process", "signatures", "programs"},
    "optimizers": {"process", "signatures", "programs", "optimizers"},
    "experiments": {"process", "signatures", "programs", "optimizers", "experiments", "data"},
    "data": {"process", "data"},
}


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _sources() -> dict[str, Path]:
    """Module name (``ragscale.programs.rag``; a package by its own name) -> source file."""
    modules = {}
    for root in SOURCE_ROOTS:
        for path in (REPO / root).rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            parts = path.relative_to(REPO).with_suffix("").parts
            if parts[0] == DOOR:  # the door's modules sit at the namespace's root: ragscale, ragscale.api
                parts = parts[1:]
            if parts and parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(("ragscale", *parts))] = path
    return modules


def _imported(node: ast.AST, modules: dict[str, Path]) -> list[str]:
    """The modules an import statement names (none for another node): ``from a.b import c`` is ``a.b.c`` when that
    is a ragscale module, else ``a.b``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [name for alias in node.names if (name := f"{node.module}.{alias.name}") in modules] or [node.module]
    return []


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The ragscale modules a file imports, those inside functions included."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return {name for node in ast.walk(tree) for name in _imported(node, modules) if name.startswith("ragscale.")}


def _graph() -> dict[str, set[str]]:
    modules = _sources()
    return {name: _imports(path, modules) - {name} for name, path in modules.items()}


def _folder(module: str) -> str:
    """The layout folder a module lives in: its first name under ``ragscale``, or the door's own folder."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in SOURCE_ROOTS else DOOR


def test_every_source_package_is_listed_in_pyproject():
    setuptools = _pyproject()["tool"]["setuptools"]
    listed_dirs = set(setuptools["package-dir"].values())
    found = {
        str(init.parent.relative_to(REPO))
        for root in SOURCE_ROOTS
        for init in (REPO / root).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert found, "no source packages found"
    assert found - listed_dirs == set(), "add these folders to [tool.setuptools.package-dir] and packages"


def test_the_door_is_the_namespaces_root_package():
    assert _pyproject()["tool"]["setuptools"]["package-dir"][DOOR] == DOOR


def test_every_mapped_package_is_in_the_package_list():
    setuptools = _pyproject()["tool"]["setuptools"]
    assert set(setuptools["package-dir"]) == set(setuptools["packages"])


def test_packages_live_under_the_ragscale_namespace():
    setuptools = _pyproject()["tool"]["setuptools"]
    assert all(name == DOOR or name.startswith("ragscale.") for name in setuptools["packages"])


def test_every_source_module_is_found_under_a_folder_of_the_layout():
    graph = _graph()
    assert {_folder(m) for m in graph} == set(SOURCE_ROOTS)
    assert all(imported in graph for imports in graph.values() for imported in imports), "import of a missing module"


def _wrong_direction(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{module} imports {imported}"
        for module, imports in graph.items()
        for imported in imports
        if _folder(imported) not in MAY_IMPORT[_folder(module)]
    )


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    cycles: list[list[str]] = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while (member := stack.pop()) != node:
                component.append(member)
            if component:
                cycles.append(sorted([node, *component]))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


EXPERIMENTS_MAY_IMPORT = {
    "": {""},
    "sweep": {"", "sweep"},
    "collection": {"", "collection"},
    "cli": {"", "sweep", "collection", "cli"},
}
"""Inside `experiments`, the sub-package a module lives in (``""``: experiments' own modules, its package included)
-> those it may import: its own modules are the bottom, the sweep and the document collections stand on them side by
side, and the command line on all three."""


def _sublayer(module: str) -> str | None:
    """The sub-package of `experiments` a module lives in (``""`` for experiments' own modules), None outside it."""
    parts = module.split(".")
    if parts[:2] != ["ragscale", "experiments"]:
        return None
    return parts[2] if len(parts) > 2 and parts[2] in EXPERIMENTS_MAY_IMPORT else ""


def _back_up(graph: dict[str, set[str]]) -> list[str]:
    """The imports inside `experiments` against ``EXPERIMENTS_MAY_IMPORT``."""
    return sorted(
        f"{module} imports {imported}"
        for module, imports in graph.items()
        if _sublayer(module) is not None
        for imported in imports
        if _sublayer(imported) is not None and _sublayer(imported) not in EXPERIMENTS_MAY_IMPORT[_sublayer(module)]
    )


def test_imports_flow_one_way_signatures_programs_optimizers_experiments_and_experiments_to_data():
    assert _wrong_direction(_graph()) == []


def test_inside_experiments_no_module_imports_back_up_from_its_own_modules_to_sweep_or_collection_to_cli():
    assert _back_up(_graph()) == []


def test_every_subpackage_of_experiments_has_a_place_in_its_order():
    packages = {init.parent.name for init in (REPO / "experiments").glob("*/__init__.py")}
    assert packages == set(EXPERIMENTS_MAY_IMPORT) - {""}


def test_no_module_takes_part_in_an_import_cycle_lazy_imports_included():
    assert _cycles(_graph()) == []


def test_the_layout_checks_catch_a_lazy_import_that_goes_back_and_closes_a_cycle(tmp_path, monkeypatch):
    for folder in SOURCE_ROOTS:
        (tmp_path / folder).mkdir()
    (tmp_path / "programs" / "a.py").write_text("def f():\n    from ragscale.experiments.b import g\n")
    (tmp_path / "experiments" / "b.py").write_text("from ragscale.programs.a import f\n\ndef g():\n    pass\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    graph = _graph()
    assert _wrong_direction(graph) == ["ragscale.programs.a imports ragscale.experiments.b"]
    assert _cycles(graph) == [["ragscale.experiments.b", "ragscale.programs.a"]]


def test_the_layout_checks_catch_an_experiments_module_that_imports_back_up_or_sideways(tmp_path, monkeypatch):
    for folder in (*SOURCE_ROOTS, "experiments/sweep", "experiments/collection", "experiments/cli"):
        (tmp_path / folder).mkdir(exist_ok=True)
    (tmp_path / "experiments" / "runner.py").write_text("def f():\n    from ragscale.experiments.sweep.run import g\n")
    (tmp_path / "experiments" / "sweep" / "run.py").write_text("from ragscale.experiments.runner import f\ng = f\n")
    (tmp_path / "experiments" / "collection" / "ask.py").write_text("import ragscale.experiments.sweep.run\n")
    (tmp_path / "experiments" / "cli" / "main.py").write_text(
        "from ragscale.experiments.collection import ask\nfrom ragscale.experiments.sweep.run import g\n"
    )
    (tmp_path / "experiments" / "sweep" / "report.py").write_text("from ragscale.experiments.cli.main import x\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert _back_up(_graph()) == [
        "ragscale.experiments.collection.ask imports ragscale.experiments.sweep.run",
        "ragscale.experiments.runner imports ragscale.experiments.sweep.run",
        "ragscale.experiments.sweep.report imports ragscale.experiments.cli.main",
    ]


def test_the_layout_checks_catch_a_layer_or_the_door_that_imports_published(tmp_path, monkeypatch):
    for folder in SOURCE_ROOTS:
        (tmp_path / folder).mkdir()
    (tmp_path / "published" / "pages.py").write_text("from ragscale.experiments.runner import f\n")
    (tmp_path / "experiments" / "runner.py").write_text("def f():\n    from ragscale.published.pages import g\n")
    (tmp_path / DOOR / "api.py").write_text("import ragscale.published.pages\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert _wrong_direction(_graph()) == [
        "ragscale.api imports ragscale.published.pages",
        "ragscale.experiments.runner imports ragscale.published.pages",
    ]


def test_every_folder_may_import_process_and_process_imports_no_other_folder(tmp_path, monkeypatch):
    for folder in SOURCE_ROOTS:
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "m.py").write_text("from ragscale.process.setup import go\n")
    (tmp_path / "process" / "setup.py").write_text("def go():\n    from ragscale.data.m import x\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert _wrong_direction(_graph()) == ["ragscale.process.setup imports ragscale.data.m"]
