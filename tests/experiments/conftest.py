"""Data for experiments: made-up HotpotQA-shaped questions in a data folder, and documents to ingest."""

import json
import shutil
from pathlib import Path

import pytest
from doubles import record

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


@pytest.fixture
def data_dir(tmp_path) -> Path:
    """hotpotqa/train.jsonl (q0-q3) and hotpotqa/dev.jsonl (q4-q6) in the shared schema: 14 passages."""
    folder = tmp_path / "data" / "hotpotqa"
    folder.mkdir(parents=True)
    for split, ids in (("train", range(4)), ("dev", range(4, 7))):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(record(i)) + "\n" for i in ids))
    return tmp_path / "data"
