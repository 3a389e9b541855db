"""A GGUF file's tokenizer and config, converted once and read back as JSON, as transformers converts them."""

import pytest

from ragscale.programs.lm.models import resolve

pytestmark = pytest.mark.slow


def test_a_gguf_tokenizer_and_config_are_converted_once_then_read_back_as_json(tmp_path):
    from transformers import AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    from ragscale.programs.lm.gguf_metadata import converted_dir, gguf_metadata

    path = resolve("smollm2-135m")
    converted, fields = gguf_metadata(path, tmp_path)
    folder = converted_dir(path, tmp_path)
    assert folder.parent == tmp_path / "converted" and (folder / "tokenizer.json").is_file()
    assert {f.suffix for f in folder.iterdir()} <= {".json", ".jinja", ".txt"}  # no pickle, nothing that runs
    assert [f.name for f in folder.parent.iterdir()] == [folder.name]  # no scratch folder left beside it
    read_back, fields_read_back = gguf_metadata(path, tmp_path)
    reference = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    assert fields == fields_read_back == load_gguf_checkpoint(str(path))["config"]
    text = "Paris, 1889: naïve 東京 [[ ## answer ## ]]\n\n  two spaces"
    messages = [{"role": "system", "content": "Answer."}, {"role": "user", "content": text}]
    for tokenizer in (converted, read_back):
        assert tokenizer(text)["input_ids"] == reference(text)["input_ids"]
        assert tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == (
            reference.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        )
        assert (tokenizer.eos_token_id, tokenizer.bos_token_id, len(tokenizer)) == (
            reference.eos_token_id,
            reference.bos_token_id,
            len(reference),
        )
