"""load_document: one file into chunks; a file that cannot be read fails naming it."""

from pathlib import Path

import pytest

from ragscale.data.documents import (
    DocumentError,
    load_document,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "documents"


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


def test_files_of_one_name_in_two_folders_keep_the_name_but_differ_in_source_and_ids(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "notes.txt").write_text("The keeper climbs 117 steps.\n", encoding="utf-8")
    first, second = (load_document(tmp_path / folder / "notes.txt") for folder in ("a", "b"))
    assert first[0].document == second[0].document == "notes.txt"
    assert first[0].source == (tmp_path / "a" / "notes.txt").resolve().as_posix()
    assert first[0].source != second[0].source and first[0].id != second[0].id
