"""Documents to ingest (the made-up questions, ``data_dir``, are in tests/conftest.py)."""

import shutil
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
SHARED_DOCUMENTS = TESTS.parent.parent / "shared" / "documents"
FIXTURES = TESTS / "fixtures" / "documents"


@pytest.fixture
def documents(tmp_path) -> Path:
    """A folder with the fixture text files and the MIT table PDF (copies, so a test may change them)."""
    folder = tmp_path / "docs"
    folder.mkdir()
    for name in ("report.md", "page.html", "notes.txt", "harbour_faq.md"):
        shutil.copy(FIXTURES / name, folder / name)
    shutil.copy(SHARED_DOCUMENTS / "simple_table.pdf", folder / "simple_table.pdf")
    return folder
