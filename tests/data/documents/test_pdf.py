"""PDF pages -> chunks: text per page, tables as markdown, pictures as text; broken PDFs fail naming the file."""

from pathlib import Path

import pytest

from ragscale.data.documents import (
    DocumentError,
    load_document,
)

SHARED_DOCUMENTS = Path(__file__).resolve().parents[3].parent / "shared" / "documents"


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
