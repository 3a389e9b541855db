"""Documents -> chunks: PDF text per page, tables as markdown, pictures as text; errors name the file."""

from pathlib import Path

import pytest

from ragscale.data.documents import (
    Block,
    DocumentError,
    chunk_blocks,
    load_document,
    table_markdown,
)

SHARED_DOCUMENTS = Path(__file__).resolve().parents[2].parent / "shared" / "documents"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "documents"


@pytest.fixture(scope="module")
def shared_documents() -> Path:
    if not SHARED_DOCUMENTS.is_dir():
        pytest.fail(f"shared documents not found at {SHARED_DOCUMENTS}: tests need ../shared beside the repository")
    return SHARED_DOCUMENTS


def test_a_pdf_table_comes_out_as_a_markdown_table_on_its_page(shared_documents):
    chunks = load_document(shared_documents / "simple_table.pdf")
    tables = [c for c in chunks if c.kind == "table"]
    assert len(tables) == 1
    assert tables[0].page == 1
    assert tables[0].method == "pdfplumber-table"
    assert "| Header 1 | Header 2 |\n| --- | --- |\n| Cell 1 | Cell 2 |\n| Cell 3 | Cell 4 |" in tables[0].text
    assert all(c.document == "simple_table.pdf" for c in chunks)


def test_a_pdf_picture_becomes_text_with_the_method_recorded(shared_documents):
    chunks = load_document(shared_documents / "simple_figure.pdf")
    pictures = [c for c in chunks if c.kind == "picture"]
    assert len(pictures) == 1
    picture = pictures[0]
    assert picture.page == 1
    # The figure is a raster image without words: OCR finds nothing it trusts, so its surrounding text stands in.
    assert picture.method in ("ocr:rapidocr", "caption")
    assert "This text is before the figure" in picture.text
    texts = [c for c in chunks if c.kind == "text"]
    assert texts and "Simple Figure" in texts[0].text


def test_a_ten_page_report_keeps_pages_tables_and_charts_apart(shared_documents):
    chunks = load_document(shared_documents / "financial_market_analysis_report_2023.pdf", ocr=False)
    assert {c.page for c in chunks} == set(range(1, 11))
    tables = [c for c in chunks if c.kind == "table"]
    assert [t.page for t in tables] == [7]
    assert "| Ethereum | 0.35 | 0.45 | 0.9 | 1 |" in tables[0].text
    charts = {c.page for c in chunks if c.kind == "picture"}
    assert charts == {3, 4, 5, 6, 8, 9}
    oil_chart = next(c for c in chunks if c.kind == "picture" and c.page == 6)
    assert "Price Changes of Oil, Gold, and Wheat" in oil_chart.text
    assert oil_chart.method == "text-layer"
    # chart labels are not left in the page's running text
    page6_text = " ".join(c.text for c in chunks if c.page == 6 and c.kind == "text")
    assert "-25%" not in page6_text and "Commodities such as oil, gold, and wheat" in page6_text


def test_chunk_ids_are_stable_and_unique(shared_documents):
    first = load_document(shared_documents / "simple_table.pdf")
    second = load_document(shared_documents / "simple_table.pdf")
    assert [c.id for c in first] == [c.id for c in second]
    assert len({c.id for c in first}) == len(first)


def test_a_corrupt_pdf_fails_with_an_error_naming_the_file(tmp_path):
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog >>\nthis is not a pdf body\n%%EOF\n")
    with pytest.raises(DocumentError, match=r"broken\.pdf"):
        load_document(broken)


def test_an_encrypted_pdf_fails_with_an_error_saying_so(tmp_path):
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.add_blank_page(width=200, height=200)
    writer.encrypt(user_password="secret", algorithm="RC4-128")
    locked = tmp_path / "locked.pdf"
    with locked.open("wb") as handle:
        writer.write(handle)
    with pytest.raises(DocumentError, match=r"locked\.pdf.*encrypted"):
        load_document(locked)


def test_an_empty_file_fails_with_an_error_naming_it(tmp_path):
    empty = tmp_path / "empty.pdf"
    empty.write_bytes(b"")
    with pytest.raises(DocumentError, match=r"empty\.pdf: the file is empty"):
        load_document(empty)


def test_an_unsupported_suffix_lists_the_supported_ones(tmp_path):
    sheet = tmp_path / "sheet.xlsx"
    sheet.write_bytes(b"PK")
    with pytest.raises(DocumentError, match=r"sheet\.xlsx.*supported: \.pdf"):
        load_document(sheet)


def test_the_chunker_keeps_a_heading_with_its_paragraphs_and_repeats_it_on_overflow():
    blocks = [
        Block("heading", "Cargo"),
        Block("paragraph", " ".join(["alpha"] * 30)),
        Block("paragraph", " ".join(["beta"] * 30)),
        Block("heading", "Fishing"),
        Block("paragraph", "The fleet shrank."),
    ]
    chunks = chunk_blocks(blocks, max_tokens=40)
    assert chunks[0].startswith("Cargo\n\nalpha")
    assert chunks[1].startswith("Cargo\n\nbeta")  # the section continues under its heading
    assert chunks[2] == "Fishing\n\nThe fleet shrank."
    assert all(len(c.split()) <= 40 for c in chunks)
    assert not any(c.rstrip().endswith(("Cargo", "Fishing")) for c in chunks)


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


def test_a_grid_of_mostly_empty_cells_is_not_a_table():
    assert table_markdown([["2019 2018", ""], ["", "6"], ["2015", ""]]) is None
    assert table_markdown([["a", "b"], ["1", "2"]]) == "| a | b |\n| --- | --- |\n| 1 | 2 |"


def test_files_of_one_name_in_two_folders_keep_the_name_but_differ_in_source_and_ids(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "notes.txt").write_text("The keeper climbs 117 steps.\n", encoding="utf-8")
    first, second = (load_document(tmp_path / folder / "notes.txt") for folder in ("a", "b"))
    assert first[0].document == second[0].document == "notes.txt"
    assert first[0].source == (tmp_path / "a" / "notes.txt").resolve().as_posix()
    assert first[0].source != second[0].source and first[0].id != second[0].id
