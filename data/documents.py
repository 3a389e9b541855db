"""Documents -> chunks: PDF pages (text, tables as markdown, pictures as text), and .txt / .md / .html files.

Every chunk keeps its document (the file name, cited in answers), its source (the file's resolved path: the key
that tells apart two files of one name in different folders), its page (1-based; 1 for non-PDF files), its kind
(``text``, ``table`` or ``picture``), how its text was obtained (``method``) and a stable id: a short SHA-256 of
source, page, kind, position on the page and text, so the same file always gives the same ids.

PDF pages (pdfplumber, MIT; pypdf, BSD, for the encryption check), in this order:

1. **Tables**: ``page.find_tables()``; a table is kept when, after dropping empty rows and columns, it has at
   least two rows and two columns and a third of its cells hold text (charts drawn with rectangles otherwise
   pass as tables). Written as a markdown table (first row = header) under the line of text just above it
   (its caption), method ``pdfplumber-table``.
2. **Pictures**: embedded images, and the region spanned by vector graphics (curves, lines, rectangles smaller
   than half the page, outside tables) when there are at least three such objects: exported charts are drawn,
   not embedded. A picture becomes text by, in order: a vision-language model when a ``describer`` is given
   (``VLMDescriber``, an OpenAI-compatible server; method ``vlm:<model>``); the words of the PDF text layer
   inside the picture (chart titles, axis labels, legends; method ``text-layer``); OCR of the rendered region
   with RapidOCR, whose wheel ships its ONNX models (method ``ocr:rapidocr``); else its caption and the text
   around it (method ``caption``). The caption (a line starting with "Figure"/"Chart" near the picture, else
   the line just above it) is always included.
3. **Text**: the remaining characters, split into two columns when a vertical gutter separates them, grouped
   into lines, then into paragraphs at vertical gaps and bullets; a line in a font clearly larger than the
   body text is a heading. ``chunk_blocks`` packs them (method ``pdfplumber-text``).

The structure-aware chunker (``chunk_blocks``): a heading starts a new chunk and is never left at the end of
one; paragraphs are packed greedily up to ``max_tokens``; a section that overflows continues in a new chunk
that repeats its heading; a paragraph over the budget is split at sentences (``chunk_text``). Chunks never
cross pages, so a chunk's page is exact.

Corrupt, encrypted and empty files raise ``DocumentError`` naming the file. Heavy libraries (pdfplumber,
pypdf, rapidocr) are imported when a PDF or a picture is read.
"""

from __future__ import annotations

import hashlib
import html.parser
import itertools
import logging
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ragscale.data.corpus import chunk_text, whitespace_tokens

logger = logging.getLogger(__name__)

SUFFIXES = (".pdf", ".txt", ".md", ".markdown", ".html", ".htm")
KINDS = ("text", "table", "picture")
DEFAULT_MAX_TOKENS = 150
"""Words per chunk by default: with a heading and a context prepended it stays under MiniLM's 256 word pieces."""


class DocumentError(ValueError):
    """A file that cannot be ingested; the message names the file and why."""


@dataclass(frozen=True)
class Chunk:
    """One retrievable piece of a document: ``document`` is the file name shown to readers, ``source`` the
    resolved path that identifies the file."""

    id: str
    document: str
    page: int
    kind: str
    text: str
    method: str
    source: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def chunk_id(source: str, page: int, kind: str, position: int, text: str) -> str:
    """Stable id of a chunk: a short SHA-256 of where it is (file, page, kind, position) and what it says."""
    key = f"{source}\n{page}\n{kind}\n{position}\n{text}"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


def document_source(path: str | Path) -> str:
    """The key of a document: its resolved absolute path (symlinks followed), as a POSIX string."""
    return Path(path).resolve().as_posix()


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes (re-ingestion compares it to skip unchanged files)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------------------------
# structure-aware chunking


@dataclass(frozen=True)
class Block:
    """A heading or a paragraph of running text."""

    kind: str  # "heading" or "paragraph"
    text: str


def chunk_blocks(
    blocks: Sequence[Block],
    max_tokens: int = DEFAULT_MAX_TOKENS,
    count_tokens: Callable[[str], int] = whitespace_tokens,
) -> list[str]:
    """Pack headings and paragraphs into chunks of at most ``max_tokens`` (see the module docstring)."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    chunks: list[str] = []
    heading = ""
    body: list[str] = []

    def flush() -> None:
        if body:
            chunks.append("\n\n".join([heading, *body] if heading else body))
        elif heading:  # a section with no text of its own (a slide title, a heading at the page end)
            chunks.append(heading)
        body.clear()

    for block in blocks:
        text = " ".join(block.text.split())
        if not text:
            continue
        if block.kind == "heading":
            if heading and not body:  # consecutive headings: keep them together
                heading = f"{heading}\n{text}"
                continue
            flush()
            heading = text
            continue
        budget = max(1, max_tokens - (count_tokens(heading) if heading else 0))
        pieces = [text] if count_tokens(text) <= budget else chunk_text(text, budget, count_tokens)
        for piece in pieces:
            candidate = "\n\n".join([heading, *body, piece] if heading else [*body, piece])
            if body and count_tokens(candidate) > max_tokens:
                chunks.append("\n\n".join([heading, *body] if heading else body))
                body.clear()
            body.append(piece)
    flush()
    return chunks


# ---------------------------------------------------------------------------------------------------------------
# pictures


class PictureDescriber(Protocol):
    """Turns a picture into text: ``describe(image, caption=...) -> (text, method)``; empty text if it cannot."""

    def describe(self, image: Any, *, caption: str) -> tuple[str, str]: ...


class OCRDescriber:
    """RapidOCR (ONNX Runtime; the ``rapidocr-onnxruntime`` wheel ships its detection and recognition models).

    Lines recognised with a confidence below ``min_confidence`` are dropped. The engine is loaded once.
    """

    method = "ocr:rapidocr"
    _engine: Any = None

    def __init__(self, min_confidence: float = 0.9) -> None:
        self.min_confidence = min_confidence

    def describe(self, image: Any, *, caption: str) -> tuple[str, str]:
        import numpy as np

        if OCRDescriber._engine is None:
            try:
                from rapidocr_onnxruntime import RapidOCR
            except ImportError as error:
                raise ImportError("OCR of pictures needs: pip install rapidocr-onnxruntime==1.4.4") from error
            OCRDescriber._engine = RapidOCR()
        result, _ = OCRDescriber._engine(np.array(image.convert("RGB")))
        lines = [text for _, text, score in (result or []) if float(score) >= self.min_confidence]
        return " ".join(lines), self.method


class VLMDescriber:
    """A vision-language model behind an OpenAI-compatible ``/v1/chat/completions`` (vLLM, SGLang, Ollama).

    ``VLMDescriber("http://localhost:8000/v1", "Qwen/Qwen2.5-VL-3B-Instruct")``. The picture is sent as a PNG
    data URL with ``prompt``; the reply is the picture's text. Not exercised by the tests (no server here).
    """

    prompt = (
        "Describe this picture from a report for a search index. If it is a chart, give its title, axes, "
        "series and the values you can read; if it is a table, write it as a markdown table. Be factual."
    )

    def __init__(self, api_base: str, model: str, *, api_key: str = "unused", timeout_s: float = 120.0) -> None:
        self.api_base = api_base.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.method = f"vlm:{model}"

    def describe(self, image: Any, *, caption: str) -> tuple[str, str]:
        import base64
        import io
        import json
        import urllib.request

        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
        prompt = self.prompt + (f"\nIts caption: {caption}" if caption else "")
        payload = {
            "model": self.model,
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": prompt}, {"type": "image_url", "image_url": {"url": url}}],
                }
            ],
            "temperature": 0.0,
        }
        request = urllib.request.Request(
            f"{self.api_base}/chat/completions",
            data=json.dumps(payload).encode("utf-8"),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.api_key}"},
        )
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            reply = json.load(response)
        return reply["choices"][0]["message"]["content"].strip(), self.method


# ---------------------------------------------------------------------------------------------------------------
# PDF


@dataclass
class _Region:
    bbox: tuple[float, float, float, float]  # x0, top, x1, bottom
    raster: bool = False
    objects: int = 0
    extra: dict = field(default_factory=dict)


def _inside(obj: dict, bbox: tuple[float, float, float, float], margin: float = 1.0) -> bool:
    x = (obj["x0"] + obj["x1"]) / 2
    y = (obj["top"] + obj["bottom"]) / 2
    return bbox[0] - margin <= x <= bbox[2] + margin and bbox[1] - margin <= y <= bbox[3] + margin


def _overlaps(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def table_markdown(rows: Sequence[Sequence[str | None]]) -> str | None:
    """A markdown table of ``rows`` (first row = header), or None when it does not look like a table.

    Empty rows and columns are dropped; the rest must have >= 2 rows, >= 2 columns and a third of its cells
    filled.
    """
    cells = [[" ".join((cell or "").split()).replace("|", "/") for cell in row] for row in rows]
    cells = [row for row in cells if any(row)]
    if not cells:
        return None
    width = max(len(row) for row in cells)
    cells = [row + [""] * (width - len(row)) for row in cells]
    keep = [c for c in range(width) if any(row[c] for row in cells)]
    cells = [[row[c] for c in keep] for row in cells]
    if len(cells) < 2 or len(keep) < 2:
        return None
    filled = sum(bool(cell) for row in cells for cell in row)
    if filled < len(cells) * len(keep) / 3 or sum(sum(map(bool, row)) >= 2 for row in cells) < 2:
        return None
    lines = ["| " + " | ".join(cells[0]) + " |", "|" + " --- |" * len(keep)]
    lines += ["| " + " | ".join(row) + " |" for row in cells[1:]]
    return "\n".join(lines)


def _lines(words: list[dict], tolerance: float = 3.0) -> list[dict]:
    """Group words into lines (same baseline within ``tolerance``), top to bottom, words left to right."""
    lines: list[dict] = []
    for word in sorted(words, key=lambda w: (round(w["top"]), w["x0"])):
        for line in reversed(lines[-3:]):
            if abs(line["bottom"] - word["bottom"]) <= tolerance:
                line["words"].append(word)
                line["top"] = min(line["top"], word["top"])
                line["bottom"] = max(line["bottom"], word["bottom"])
                break
        else:
            lines.append({"top": word["top"], "bottom": word["bottom"], "words": [word]})
    for line in lines:
        line["words"].sort(key=lambda w: w["x0"])
        line["text"] = " ".join(w["text"] for w in line["words"])
        line["size"] = statistics.median(w.get("size", 0.0) for w in line["words"])
        line["x0"] = line["words"][0]["x0"]
    lines.sort(key=lambda line: line["top"])
    return lines


def _columns(words: list[dict], width: float, body_size: float = 0.0) -> list[list[dict]]:
    """Split words at a vertical gutter near the middle of the page when both sides hold text.

    The gutter is looked for among body-size words; larger words (titles spanning both columns) go with the left
    column, whose reading order (top to bottom) puts a title first."""
    large = [w for w in words if body_size and w.get("size", 0.0) >= 1.2 * body_size]
    body = [w for w in words if not (body_size and w.get("size", 0.0) >= 1.2 * body_size)]
    if len(body) < 40:
        return [words]
    best_x, best_cross = None, None
    for x in range(int(width * 0.35), int(width * 0.65), 2):
        cross = sum(1 for w in body if w["x0"] < x < w["x1"])
        if best_cross is None or cross < best_cross:
            best_x, best_cross = x, cross
    if best_x is None or best_cross > max(1, 0.02 * len(body)):
        return [words]
    left = [w for w in body if (w["x0"] + w["x1"]) / 2 < best_x]
    right = [w for w in body if (w["x0"] + w["x1"]) / 2 >= best_x]
    if min(len(left), len(right)) < 0.08 * len(body):
        return [words]
    return [large + left, right]


def _blocks(lines: list[dict], body_size: float) -> list[Block]:
    """Lines -> headings and paragraphs, by font size, vertical gaps and bullets."""
    if not lines:
        return []
    gaps = [b["top"] - a["bottom"] for a, b in itertools.pairwise(lines) if b["top"] > a["bottom"]]
    usual_gap = statistics.median(gaps) if gaps else 2.0
    blocks: list[Block] = []
    current: list[str] = []
    current_heading = False
    previous = None
    for line in lines:
        is_heading = body_size > 0 and line["size"] >= 1.2 * body_size and len(line["text"].split()) <= 20
        new_block = (
            previous is None
            or is_heading != current_heading
            or line["top"] - previous["bottom"] > 1.6 * usual_gap + 1.0
            or line["text"][:1] in "•▪●◦-\u2013"
        )
        if new_block and current:
            blocks.append(Block("heading" if current_heading else "paragraph", " ".join(current)))
            current = []
        current.append(line["text"].lstrip("•▪●◦ "))
        current_heading = is_heading
        previous = line
    if current:
        blocks.append(Block("heading" if current_heading else "paragraph", " ".join(current)))
    return blocks


def _caption(lines: list[dict], bbox: tuple[float, float, float, float]) -> str:
    """The picture's caption: a "Figure ..." / "Chart ..." line near it, else the line just above it."""
    near = [ln for ln in lines if bbox[1] - 60 <= ln["top"] <= bbox[3] + 80 and ln["words"][-1]["x1"] > bbox[0]]
    for line in near:
        if re.match(r"(figure|fig\.|chart|graph|exhibit)\s*\d*", line["text"], flags=re.IGNORECASE):
            return line["text"]
    above = [
        ln
        for ln in lines
        if ln["bottom"] <= bbox[1] + 2 and ln["words"][0]["x0"] < bbox[2] and ln["words"][-1]["x1"] > bbox[0]
    ]
    return above[-1]["text"] if above and bbox[1] - above[-1]["bottom"] < 60 else ""


def _surrounding(lines: list[dict], bbox: tuple[float, float, float, float]) -> str:
    above = [ln["text"] for ln in lines if ln["bottom"] <= bbox[1] + 2][-2:]
    below = [ln["text"] for ln in lines if ln["top"] >= bbox[3] - 2][:2]
    return " ".join([*above, *below])


def _picture_regions(page: Any, tables: list[tuple[float, ...]]) -> list[_Region]:
    area = page.width * page.height
    regions: list[_Region] = []
    for image in page.images:
        bbox = (image["x0"], image["top"], image["x1"], image["bottom"])
        w, h = bbox[2] - bbox[0], bbox[3] - bbox[1]
        if w < 20 or h < 20 or w * h > 0.9 * area:
            continue
        regions.append(_Region(bbox, raster=True, objects=1))
    graphics = [
        obj
        for obj in [*page.curves, *page.lines, *page.rects]
        if (obj["x1"] - obj["x0"]) * (obj["bottom"] - obj["top"]) < 0.5 * area
        and not any(_inside(obj, t) for t in tables)
        and not any(_inside(obj, r.bbox) for r in regions)
    ]
    if len(graphics) >= 3:
        bbox = (
            min(o["x0"] for o in graphics),
            min(o["top"] for o in graphics),
            max(o["x1"] for o in graphics),
            max(o["bottom"] for o in graphics),
        )
        if (bbox[2] - bbox[0]) >= 30 and (bbox[3] - bbox[1]) >= 30:
            pad = 0.04 * page.width
            bbox = (bbox[0] - pad, bbox[1], bbox[2], bbox[3] + pad)
            regions.append(_Region(bbox, raster=False, objects=len(graphics)))
    return regions


def _open_pdf(path: Path) -> Any:
    """pdfplumber's PDF after pypdf's checks: empty, not a PDF, encrypted -> DocumentError naming the file."""
    import pdfplumber
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(str(path))
        if reader.is_encrypted and not reader.decrypt(""):
            raise DocumentError(f"{path}: the PDF is encrypted (password-protected); decrypt it first")
        if reader.is_encrypted:
            raise DocumentError(f"{path}: the PDF is encrypted; decrypt it first (qpdf --decrypt)")
        pages = len(reader.pages)
    except DocumentError:
        raise
    except (PdfReadError, ValueError, OSError, KeyError, TypeError) as error:
        raise DocumentError(f"{path}: not a readable PDF ({type(error).__name__}: {error})") from error
    if pages == 0:
        raise DocumentError(f"{path}: the PDF has no pages")
    try:
        return pdfplumber.open(str(path))
    except Exception as error:  # pdfminer raises many unrelated types for damaged files
        raise DocumentError(f"{path}: not a readable PDF ({type(error).__name__}: {error})") from error


def parse_pdf(
    path: str | Path,
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    count_tokens: Callable[[str], int] = whitespace_tokens,
    describer: PictureDescriber | None = None,
    ocr: bool = True,
    resolution: int = 150,
) -> list[Chunk]:
    """The chunks of one PDF (see the module docstring). ``ocr=False`` skips OCR (caption fallback instead)."""
    path = Path(path)
    name, source = path.name, document_source(path)
    chunks: list[Chunk] = []
    ocr_describer = OCRDescriber() if ocr else None
    with _open_pdf(path) as pdf:
        for number, page in enumerate(pdf.pages, start=1):
            try:
                chunks.extend(
                    _parse_page(
                        page, name, source, number, max_tokens, count_tokens, describer, ocr_describer, resolution
                    )
                )
            except DocumentError:
                raise
            except Exception as error:  # pdfminer/pdfplumber fail with many types on damaged content streams
                raise DocumentError(
                    f"{path}: page {number} cannot be read ({type(error).__name__}: {error})"
                ) from error
    return chunks


def _parse_page(
    page: Any,
    name: str,
    source: str,
    number: int,
    max_tokens: int,
    count_tokens: Callable[[str], int],
    describer: PictureDescriber | None,
    ocr_describer: OCRDescriber | None,
    resolution: int,
) -> list[Chunk]:
    words = page.extract_words(extra_attrs=["size"], keep_blank_chars=False, use_text_flow=False)
    all_lines = _lines(words)
    pieces: list[tuple[str, str, str]] = []  # (kind, text, method)

    tables: list[tuple[float, ...]] = []
    for table in page.find_tables():
        markdown = table_markdown(table.extract())
        if markdown is None:
            continue
        bbox = tuple(table.bbox)
        tables.append(bbox)
        caption = _caption(all_lines, bbox)
        pieces.append(("table", f"{caption}\n\n{markdown}" if caption else markdown, "pdfplumber-table"))

    regions = _picture_regions(page, tables)
    for region in regions:
        inner = [w for w in words if _inside(w, region.bbox)]
        caption = _caption(all_lines, region.bbox)
        layer = " ".join(line["text"] for line in _lines(inner))
        text, method = "", ""
        if describer is not None or (not layer and ocr_describer is not None):
            image = page.crop(_clip(region.bbox, page)).to_image(resolution=resolution).original
            text, method = (describer or ocr_describer).describe(image, caption=caption)
        if not text and layer:
            text, method = layer, "text-layer"
        if not text:
            text, method = _surrounding(all_lines, region.bbox), "caption"
        head = f"Picture: {caption}" if caption else "Picture"
        pieces.append(("picture", f"{head}\n\n{text}" if text else head, method))

    taken = [*tables, *(r.bbox for r in regions)]
    body = [w for w in words if not any(_inside(w, bbox) for bbox in taken)]
    sizes = [w.get("size", 0.0) for w in body for _ in w["text"]]
    body_size = statistics.median(sizes) if sizes else 0.0
    blocks: list[Block] = []
    for column in _columns(body, page.width, body_size):
        blocks.extend(_blocks(_lines(column), body_size))
    texts = chunk_blocks(blocks, max_tokens, count_tokens)
    ordered = [("text", text, "pdfplumber-text") for text in texts] + pieces
    return [
        Chunk(chunk_id(source, number, kind, position, text), name, number, kind, text, method, source)
        for position, (kind, text, method) in enumerate(ordered)
    ]


def _clip(bbox: tuple[float, ...], page: Any) -> tuple[float, float, float, float]:
    x0, top, x1, bottom = bbox
    return (max(x0, page.bbox[0]), max(top, page.bbox[1]), min(x1, page.bbox[2]), min(bottom, page.bbox[3]))


# ---------------------------------------------------------------------------------------------------------------
# text, markdown and HTML


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


def folder_documents(folder: str | Path) -> list[Path]:
    """The files under ``folder`` (recursively, sorted) with a supported suffix; hidden ones are skipped."""
    folder = Path(folder)
    return sorted(
        path
        for path in folder.rglob("*")
        if path.is_file()
        and path.suffix.lower() in SUFFIXES
        and not any(part.startswith(".") for part in path.relative_to(folder).parts)
    )


def load_document(
    path: str | Path,
    *,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    count_tokens: Callable[[str], int] = whitespace_tokens,
    describer: PictureDescriber | None = None,
    ocr: bool = True,
) -> list[Chunk]:
    """The chunks of one file; ``DocumentError`` (naming the file) when it is missing, empty, of an unsupported
    type, corrupt, encrypted, or yields no text at all."""
    path = Path(path)
    if not path.is_file():
        raise DocumentError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise DocumentError(f"{path}: unsupported file type {suffix or '(none)'!r}; supported: {', '.join(SUFFIXES)}")
    if path.stat().st_size == 0:
        raise DocumentError(f"{path}: the file is empty")
    if suffix == ".pdf":
        chunks = parse_pdf(path, max_tokens=max_tokens, count_tokens=count_tokens, describer=describer, ocr=ocr)
    else:
        chunks = parse_text_file(path, max_tokens=max_tokens, count_tokens=count_tokens)
    if not chunks:
        raise DocumentError(f"{path}: no text found (a scanned PDF without a text layer or pictures?)")
    return chunks
