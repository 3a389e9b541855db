"""A GGUF file's header read alone: the tensor table gguf's own reader finds, and a cut or foreign file refused."""

import pytest

from ragscale.programs.lm.models import resolve

pytestmark = pytest.mark.slow


def test_the_header_reader_finds_the_tensor_table_gguf_finds():
    from gguf import GGUFReader

    from ragscale.programs.lm.gguf_header import read_header

    path = resolve("smollm2-135m")
    header, reader = read_header(path), GGUFReader(path)
    assert header.architecture == str(bytes(reader.fields["general.architecture"].parts[-1]), "utf-8") == "llama"
    theirs = [
        (t.name, tuple(int(d) for d in t.shape), int(t.tensor_type), t.data_offset, t.n_bytes) for t in reader.tensors
    ]
    assert [(t.name, t.dims, t.kind, t.start, t.nbytes) for t in header.tensors] == theirs


def test_check_gguf_passes_a_whole_file_and_names_a_cut_or_foreign_one(tmp_path):
    from ragscale.programs.lm.gguf_header import check_gguf

    whole = resolve("smollm2-135m")
    check_gguf(whole)  # the packaged model is whole
    for name, content in (("data.gguf", 4 << 20), ("header.gguf", 1000)):
        cut = tmp_path / name
        with whole.open("rb") as handle:
            cut.write_bytes(handle.read(content))
        with pytest.raises(ValueError, match=rf"{name}.* truncated"):
            check_gguf(cut)
    foreign = tmp_path / "page.gguf"
    foreign.write_text("<html>404 Not Found</html>\n")
    with pytest.raises(ValueError, match=r"page\.gguf.*not a GGUF file"):
        check_gguf(foreign)
