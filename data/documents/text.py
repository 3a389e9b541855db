""".txt, .md and .html files -> chunks, all on page 1.

Plain text splits into paragraphs at blank lines; in markdown a ``#`` line is a heading; HTML gives headings,
paragraphs, tables (written as markdown tables) and pictures (their alt text). ``chunk_blocks`` packs the text.
"""

from __future__ import annotations

import html.parser
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ragscale.data.documents.chunks import (
    DEFAULT_MAX_TOKENS,
    Block,
    Chunk,
    DocumentError,
    chunk_blocks,
    chunk_id,
    document_source,
    table_markdown,
    whitespace_tokens,
)


def text_blocks(text: str, markdown: bool) -> list[Block]:
    """Paragraphs at blank lines; in markdown, ``#`` lines are headings (a setext or plain title is text)."""
    blocks: list[Block] = []
    for part in re.split(r"\n\s*\n", text):
        lines = part.strip().splitlines()
        paragraph: list[str] = []
        for line in lines:
            match = re.match(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line) if markdown else None
            if match:
                if paragraph:
                    blocks.append(Block("paragraph", " ".join(paragraph)))
                    paragraph = []
                blocks.append(Block("heading", match.group(1)))
            else:
                paragraph.append(line.strip())
        if paragraph:
            blocks.append(Block("paragraph", " ".join(paragraph)))
    return blocks


class _HTMLBlocks(html.parser.HTMLParser):
    """HTML -> headings, paragraphs, tables (rows of cells) and pictures (img alt/title, figcaption)."""

    BLOCK_TAGS = frozenset("p div li section article header footer main blockquote pre dd dt br tr".split())
    SKIP_TAGS = frozenset(("script", "style", "noscript", "template"))

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.items: list[tuple[str, Any]] = []  # ("heading"|"paragraph", text) | ("table", rows) | ("picture", text)
        self.text: list[str] = []
        self.heading = False
        self.skip = 0
        self.table: list[list[str]] | None = None
        self.row: list[str] | None = None
        self.cell: list[str] | None = None
        self.tables_open = 0

    def _flush(self) -> None:
        text = " ".join(" ".join(self.text).split())
        self.text = []
        if text:
            self.items.append(("heading" if self.heading else "paragraph", text))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIP_TAGS:
            self.skip += 1
        elif tag == "table":
            self.tables_open += 1
            if self.tables_open == 1:
                self._flush()
                self.table = []
        elif tag == "tr" and self.table is not None:
            self.row = []
        elif tag in ("td", "th") and self.row is not None:
            self.cell = []
        elif tag == "img":
            values = dict(attrs)
            description = (values.get("alt") or values.get("title") or "").strip()
            self.items.append(("picture", description))
        elif re.fullmatch(r"h[1-6]", tag):
            self._flush()
            self.heading = True
        elif tag in self.BLOCK_TAGS and self.table is None:
            self._flush()

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP_TAGS:
            self.skip = max(0, self.skip - 1)
        elif tag in ("td", "th") and self.row is not None and self.cell is not None:
            self.row.append(" ".join(" ".join(self.cell).split()))
            self.cell = None
        elif tag == "tr" and self.table is not None and self.row is not None:
            self.table.append(self.row)
            self.row = None
        elif tag == "table":
            self.tables_open = max(0, self.tables_open - 1)
            if self.tables_open == 0 and self.table is not None:
                self.items.append(("table", self.table))
                self.table = None
        elif re.fullmatch(r"h[1-6]", tag):
            self._flush()
            self.heading = False
        elif tag == "figcaption":
            self._flush()
        elif tag in self.BLOCK_TAGS and self.table is None:
            self._flush()

    def handle_data(self, data: str) -> None:
        if self.skip:
            return
        if self.cell is not None:
            self.cell.append(data)
        elif self.table is None:
            self.text.append(data)

    def close(self) -> None:
        super().close()
        self._flush()


def parse_text_file(
    path: str | Path, *, max_tokens: int = DEFAULT_MAX_TOKENS, count_tokens: Callable[[str], int] = whitespace_tokens
) -> list[Chunk]:
    """Chunks of a .txt, .md or .html file, all on page 1."""
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise DocumentError(f"{path}: not UTF-8 text ({error})") from error
    suffix = path.suffix.lower()
    pieces: list[tuple[str, str, str]] = []
    if suffix in (".html", ".htm"):
        parser = _HTMLBlocks()
        parser.feed(raw)
        parser.close()
        blocks: list[Block] = []
        for kind, value in parser.items:
            if kind == "table":
                markdown = table_markdown(value)
                if markdown:
                    pieces.append(("table", markdown, "html-table"))
                else:
                    blocks.extend(Block("paragraph", " ".join(row)) for row in value)
            elif kind == "picture":
                if value:
                    pieces.append(("picture", f"Picture\n\n{value}", "alt-text"))
            else:
                blocks.append(Block(kind, value))
        method = "html-text"
    else:
        blocks = text_blocks(raw, markdown=suffix in (".md", ".markdown"))
        method = "markdown-text" if suffix in (".md", ".markdown") else "plain-text"
    ordered = [("text", t, method) for t in chunk_blocks(blocks, max_tokens, count_tokens)] + pieces
    source = document_source(path)
    return [
        Chunk(chunk_id(source, 1, kind, position, text), path.name, 1, kind, text, how, source)
        for position, (kind, text, how) in enumerate(ordered)
    ]
