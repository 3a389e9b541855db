"""Pages whose every result is written from committed files: the directives of a markdown page, rendered.

A page cites a result through a directive, an HTML comment (invisible where the page is read) that says where the
result comes from, followed by the text it writes and a closing comment::

    <!--= table methods-hotpotqa-qwen2.5-coder-0.5b rag-none -->

    | method | optimizer | EM | ...

    <!--/-->

or inline: ``RAG answers <!--= em methods-hotpotqa-qwen2.5-coder-0.5b rag-none -->23.0<!--/--> EM``. Each
directive names a published folder under ``benchmarks/results/`` (``runs.py``) and reads only its files, every
score re-derived from the per-question records; ``directives.py`` says what each kind writes (``table``, ``em``,
``diff``, ``sweep``, ``claims``, ``made``, ...).

``render`` rewrites the text of every directive of a page; ``python benchmarks/pages.py`` rewrites ``PAGES`` in
place, and ``tests/published/test_pages.py`` checks that each page is what ``render`` gives and that no
result-shaped number (``typed_numbers``: a decimal, a percentage, a CI) stands outside a directive on the pages
written this way (``WRITTEN``). A number changed by hand, or a committed file changed without its page, fails there.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ragscale.published.directives import DirectiveError, value

PAGES = ("README.md", "docs/results.md", "docs/methods.md", "docs/scaling.md", "docs/documents.md", "docs/engine.md")
"""The pages whose directives ``benchmarks/pages.py`` renders and ``tests/published/test_pages.py`` checks."""
WRITTEN = ("README.md", "docs/results.md", "docs/methods.md", "docs/scaling.md", "docs/documents.md")
"""The pages on which every result-shaped number is a directive's."""

DIRECTIVE = re.compile(r"<!--= (?P<expr>[^>]*?) -->(?P<text>.*?)<!--/-->", re.S)
RESULT_SHAPED = re.compile(r"(?<![\w.\-/=§])[+-]?\d+\.\d+(?![\w.])|(?<![\w.])\d+(?:\.\d+)?%")
NOT_RESULTS = re.compile(r"95% CI|95% confidence|Python \d+\.\d+|Gemini\s+1\.5")
"""Result-shaped text that states no result: the confidence level of every CI, a Python version, a model's name."""
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)


def render(text: str, where: str = "page", value: Callable[[str], str] = value) -> str:
    """``text`` with every directive's text written anew by ``value``; a bad directive raises naming the line."""

    def written(match: re.Match) -> str:
        try:
            return f"<!--= {match['expr']} -->{value(match['expr'])}<!--/-->"
        except (DirectiveError, KeyError) as exc:
            line = text.count("\n", 0, match.start()) + 1
            raise DirectiveError(f"{where}:{line}: <!--= {match['expr']} -->: {exc}") from exc

    return DIRECTIVE.sub(written, text)


def typed_numbers(text: str) -> list[tuple[int, str]]:
    """The result-shaped numbers (decimals, percentages) of ``text`` outside its directives and code, with their
    line numbers: on a page in ``WRITTEN`` each one is a result typed by hand."""
    outside = DIRECTIVE.sub(lambda m: " " * len(m[0].replace("\n", "")) + "\n" * m[0].count("\n"), text)
    for hidden in (CODE, NOT_RESULTS):
        outside = hidden.sub(lambda m: re.sub(r"[^\n]", " ", m[0]), outside)
    return [(outside.count("\n", 0, m.start()) + 1, m[0]) for m in RESULT_SHAPED.finditer(outside)]
