"""Where local weights come from: presets, paths, and a plain chat template for tokenizers without one."""

import copy

import dspy
import pytest

from ragscale.programs.lm import PRESETS, load_lm
from ragscale.programs.lm.engine import TorchEngine
from ragscale.programs.lm.models import PLAIN_CHAT_TEMPLATE, resolve

pytestmark = pytest.mark.slow


def test_a_tokenizer_without_chat_template_gets_the_plain_template(engine):
    tokenizer = copy.deepcopy(engine.tokenizer)
    tokenizer.chat_template = PLAIN_CHAT_TEMPLATE
    plain = TorchEngine(engine.model, tokenizer)
    request = dspy.lm15.Request(model="m", system="Be brief.", messages=(dspy.lm15.Message.user("Hi"),))
    assert plain.render(request).endswith("Be brief.\n\nUser: Hi\nAssistant: ")


def test_unknown_preset_lists_the_valid_presets():
    with pytest.raises(ValueError, match="smollm2-135m") as error:
        load_lm("gpt-7")
    assert all(name in str(error.value) for name in PRESETS)


def test_missing_model_file_is_named(tmp_path):
    missing = tmp_path / "nope.gguf"
    with pytest.raises(FileNotFoundError, match=r"nope\.gguf"):
        resolve(str(missing))


def test_loading_a_truncated_gguf_fails_naming_it_before_transformers_reads_it(tmp_path):
    from ragscale.programs.lm.models import load_model

    path = tmp_path / "cut.gguf"
    with resolve("smollm2-135m").open("rb") as whole:
        path.write_bytes(whole.read(4 << 20))  # the header and the first tensors, not the rest
    with pytest.raises(ValueError, match=r"cut\.gguf is truncated"):
        load_model(str(path))


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


def test_a_gguf_loads_one_tensor_at_a_time_into_the_model_from_pretrained_loads():
    import torch
    from transformers import AutoModelForCausalLM

    from ragscale.programs.lm.gguf_loader import load_gguf

    path = resolve("smollm2-135m")
    streamed = load_gguf(path, torch.float32)
    reference = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    # from_pretrained also notes that the weights came from a GGUF file (quantization_config); nothing reads it
    theirs_config = {k: v for k, v in reference.config.to_dict().items() if k != "quantization_config"}
    assert streamed.config.to_dict() == theirs_config
    ours, theirs = streamed.state_dict(), reference.state_dict()
    assert ours.keys() == theirs.keys()
    assert [name for name in ours if not torch.equal(ours[name], theirs[name])] == []
    assert streamed.lm_head.weight is streamed.model.embed_tokens.weight  # tied, as the file has no output.weight
    assert streamed.generation_config.eos_token_id == reference.generation_config.eos_token_id


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
