"""Every source file and function can be read whole: no file over ``MAX_FILE_LINES`` lines, no function or method
over ``MAX_FUNCTION_LINES`` (from its ``def`` line to its last line).

A file holds one concept and a function does one thing; one that grows past its limit is split by what its parts
do. Only a kernel may stay longer: code that runs as one piece for speed and reads best whole. ``KERNELS`` names
each file or function let through, with the reason it is one; nothing else is, and an entry that no longer needs
it fails too, so it cannot go on excusing a file or function that later grows back. The files are the layout's
source files (``test_layout.SOURCE_ROOTS``).
"""

import ast

from test_layout import REPO, _sources

MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 80
KERNELS: dict[str, str] = {}
"""The kernels allowed over the limits: a source file by its path (``programs/lm/step.py``), a function by its
path and qualified name (``programs/lm/step.py:DecodeStep.forward``), each with the reason it is a kernel."""


def _texts() -> dict[str, str]:
    """Source file (relative to the repository) -> its text."""
    return {path.relative_to(REPO).as_posix(): path.read_text(encoding="utf-8") for path in _sources().values()}


def _file_lines() -> dict[str, int]:
    return {path: text.count("\n") for path, text in _texts().items()}


def _functions(source: str) -> dict[str, int]:
    """Qualified name (``Class.method``, ``outer.inner``) -> lines from its ``def`` line to its last, of every
    function and method in ``source``, nested ones included (and counted in their outer function too)."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, scope: tuple[str, ...]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = (*scope, child.name)
                if not isinstance(child, ast.ClassDef):
                    found[".".join(name)] = child.end_lineno - child.lineno + 1
                visit(child, name)
            else:
                visit(child, scope)

    visit(ast.parse(source), ())
    return found


def _function_lines() -> dict[str, int]:
    """``path:qualified name`` -> lines, of every function and method of the source files."""
    return {f"{path}:{name}": lines for path, text in _texts().items() for name, lines in _functions(text).items()}


def test_no_source_file_is_over_400_lines_unless_it_is_a_kernel():
    long = {path: lines for path, lines in _file_lines().items() if lines > MAX_FILE_LINES and path not in KERNELS}
    assert not long, f"split these files by concept (path: lines): {long}"


def test_no_function_or_method_is_over_80_lines_unless_it_is_a_kernel():
    long = {name: n for name, n in _function_lines().items() if n > MAX_FUNCTION_LINES and name not in KERNELS}
    assert not long, f"split these functions by what their parts do (path:name: lines): {long}"


def test_every_kernel_let_through_is_over_its_limit_and_says_why():
    sizes = {**_file_lines(), **_function_lines()}
    limit = {name: MAX_FUNCTION_LINES if ":" in name else MAX_FILE_LINES for name in KERNELS}
    assert {name: sizes.get(name) for name in KERNELS if sizes.get(name, 0) <= limit[name]} == {}
    assert all(reason.strip() for reason in KERNELS.values())


def test_a_function_is_measured_from_its_def_line_to_its_last_nested_and_methods_included():
    source = (
        "import functools\n"
        "\n"
        "@functools.cache\n"
        "def outer():\n"
        "    def inner():\n"
        "        return 1\n"
        "\n"
        "    return inner\n"
        "\n"
        "class Thing:\n"
        "    async def method(self):\n"
        "        pass\n"
    )
    assert _functions(source) == {"outer": 5, "outer.inner": 2, "Thing.method": 2}
