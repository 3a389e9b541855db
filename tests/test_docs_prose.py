"""The measurement pages read from the top: each opens under its title with a summary of a few short lines, the first
section follows at once, and no paragraph runs past 150 words (code, tables, headings and the directives' markup
aside)."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = (
    "docs/methods.md",
    "docs/engine.md",
    "docs/scaling.md",
    "docs/results.md",
    "docs/retrieval.md",
    "docs/ecosystem.md",
    "docs/documents.md",
    "docs/runs.md",
)
SUMMARY_LINES = 8
SUMMARY_ENDS_BEFORE_LINE = 10
FIRST_SECTION_BY_LINE = 12
LINE_CHARS = 120
PARAGRAPH_WORDS = 150

MARKUP = re.compile(r"<!--=[^>]*?-->|<!--/-->")
"""A directive's markup (``published/pages.py``): its opening comment and its closing one, not the text it writes."""
COMMENT_ONLY = re.compile(r"\s*(?:<!--.*?-->\s*)+")
LIST_ITEM = re.compile(r"\s*(?:[-*+]|\d+[.)])\s")


def paragraphs(text: str) -> list[tuple[int, str]]:
    """Each paragraph of a markdown ``text`` with the number of its first line: a run of non-blank lines outside
    fenced code that are not table rows, headings or lines of HTML comments only; a list item, with its indented
    continuation lines, is a paragraph of its own."""
    found: list[tuple[int, list[str]]] = []
    current: list[str] | None = None
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced, current = not fenced, None
            continue
        if fenced or not stripped or stripped.startswith(("|", "#")) or COMMENT_ONLY.fullmatch(line):
            current = None
            continue
        if current is None or LIST_ITEM.match(line):
            current = []
            found.append((number, current))
        current.append(line)
    return [(number, "\n".join(lines)) for number, lines in found]


def words(paragraph: str) -> int:
    """The words a reader sees: a directive's rendered text counts, its markup does not."""
    return len(MARKUP.sub(" ", paragraph).split())


def summary(text: str) -> tuple[list[tuple[int, str]], int | None]:
    """The non-blank lines between the title and the first ``## `` heading, with their numbers, and that heading's
    line number (``None`` when the page has none)."""
    lines = text.splitlines()
    first_section = next((n for n, line in enumerate(lines, 1) if line.startswith("## ")), None)
    end = (first_section or len(lines) + 1) - 1
    return [(n, lines[n - 1]) for n in range(2, end + 1) if lines[n - 1].strip()], first_section


def read(page: str) -> str:
    return (REPO / page).read_text(encoding="utf-8")


@pytest.mark.parametrize("page", PAGES)
def test_a_page_opens_with_its_title(page):
    assert read(page).startswith("# "), f"{page}:1: the page does not open with its '# ' title"


@pytest.mark.parametrize("page", PAGES)
def test_a_summary_of_at_most_eight_lines_of_prose_follows_the_title(page):
    lines, _ = summary(read(page))
    assert lines, f"{page}:2: no summary between the title and the first section"
    assert len(lines) <= SUMMARY_LINES, f"{page}:{lines[0][0]}: the summary is {len(lines)} lines (at most 8)"
    for number, line in lines:
        assert not line.lstrip().startswith(("|", "```", "#", "![")) and not COMMENT_ONLY.fullmatch(line), (
            f"{page}:{number}: the summary holds something other than prose: {line[:60]!r}"
        )
        assert len(line) <= LINE_CHARS, f"{page}:{number}: a summary line of {len(line)} characters (at most 120)"


@pytest.mark.parametrize("page", PAGES)
def test_the_summary_ends_before_line_10_and_the_first_section_starts_by_line_12(page):
    lines, first_section = summary(read(page))
    assert first_section is not None and first_section <= FIRST_SECTION_BY_LINE, (
        f"{page}:{first_section}: the first '## ' section starts after line 12"
    )
    assert lines and lines[-1][0] < SUMMARY_ENDS_BEFORE_LINE, (
        f"{page}:{lines[-1][0] if lines else 1}: the summary does not end before line 10"
    )


@pytest.mark.parametrize("page", PAGES)
def test_no_paragraph_runs_past_150_words(page):
    long = [(number, words(text)) for number, text in paragraphs(read(page)) if words(text) > PARAGRAPH_WORDS]
    assert not long, "; ".join(f"{page}:{number}: {count} words (at most 150)" for number, count in long)


def test_paragraphs_skip_code_tables_headings_and_comment_lines_and_count_each_list_item_alone():
    text = "\n".join(
        [
            "# Title",
            "one two",
            "three",
            "",
            "```",
            "code words here",
            "```",
            "| a | table |",
            "<!--= table f rag-none -->",
            "- item one",
            "  continued",
            "- item two",
            "1. numbered",
        ]
    )
    assert paragraphs(text) == [
        (2, "one two\nthree"),
        (10, "- item one\n  continued"),
        (12, "- item two"),
        (13, "1. numbered"),
    ]


def test_a_directive_counts_the_words_it_writes_not_its_markup():
    assert words("RAG scores <!--= em demo-qwen2.5-coder-0.5b rag-none -->27.0<!--/--> EM") == 4
    assert words("<!--= diff f a b -->+1.0 [-2.0, +3.0]<!--/-->") == 3
