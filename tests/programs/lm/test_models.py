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
