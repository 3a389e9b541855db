"""PDF pages -> chunks: text, tables as markdown, pictures as text (pdfplumber, MIT; pypdf, BSD, for checks).

Each page, in this order:

1. **Tables**: ``page.find_tables()``; a table is kept when, after dropping empty rows and columns, it has at
   least two rows and two columns and a third of its cells hold text (charts drawn with rectangles otherwise
   pass as tables). Written as a markdown table (first row = header) under the line of text just above it
   (its caption), method ``pdfplumber-table``.
2. **Pictures**: embedded images, and the region spanned by vector graphics (curves, lines, rectangles smaller
   than half the page, outside tables) when there are at least three such objects: exported charts are drawn,
   not embedded. A picture becomes text by, in order: a vision-language model when a ``describer`` is given; the
   words of the PDF text layer inside the picture (chart titles, axis labels, legends; method ``text-layer``);
   OCR of the rendered region (``pictures.py``); else its caption and the text around it (method ``caption``).
   The caption (a line starting with "Figure"/"Chart" near the picture, else the line just above it) is always
   included.
3. **Text**: the remaining characters, split into two columns when a vertical gutter separates them, grouped
   into lines, then into paragraphs at vertical gaps and bullets; a line in a font clearly larger than the body
   text is a heading. ``chunk_blocks`` packs them (method ``pdfplumber-text``). Chunks never cross pages, so a
   chunk's page is exact.

Corrupt, encrypted and empty files raise ``DocumentError`` naming the file. pdfplumber and pypdf are imported
when a PDF is read.
"""

from __future__ import annotations

import itertools
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pdfplumber
from pypdf import PdfReader
from pypdf.errors import PdfReadError

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
from ragscale.data.documents.pictures import OCRDescriber, PictureDescriber


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
