"""The ingestion prompt: a chunk situated in its document, the context alone in reply."""

from ragscale.signatures.documents import Situate


def test_situating_a_chunk_reads_the_document_and_the_chunk_and_writes_only_a_context():
    assert list(Situate.input_fields) == ["document", "chunk"]
    assert list(Situate.output_fields) == ["context"]
    assert Situate.instructions.endswith("Reply with the context only.")
