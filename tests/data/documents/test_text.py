"""Text, markdown and HTML files -> chunks: headings, paragraphs, tables and pictures."""

from pathlib import Path

from ragscale.data.documents import (
    load_document,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "documents"


def test_markdown_sections_become_chunks_headed_by_their_headings():
    chunks = load_document(FIXTURES / "report.md", max_tokens=25)
    texts = [c.text for c in chunks]
    assert any(t.startswith("Cargo\n\nContainer traffic rose") for t in texts)
    assert any(t.startswith("Fishing\n\nThe fishing fleet") for t in texts)
    assert {c.page for c in chunks} == {1} and {c.method for c in chunks} == {"markdown-text"}


def test_html_tables_become_markdown_and_images_their_alt_text():
    chunks = load_document(FIXTURES / "page.html")
    table = next(c for c in chunks if c.kind == "table")
    assert "| Month | Storms |\n| --- | --- |\n| January | 4 |" in table.text
    picture = next(c for c in chunks if c.kind == "picture")
    assert "white lighthouse tower" in picture.text and picture.method == "alt-text"
    text = " ".join(c.text for c in chunks if c.kind == "text")
    assert "LED modules" in text and "color: red" not in text
