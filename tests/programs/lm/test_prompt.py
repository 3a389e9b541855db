"""What a model reads and how long it is: the chat template over messages, and token counts with and without it."""

import math
from types import SimpleNamespace

import dspy

from ragscale.programs.lm.prompt import (
    CHARS_PER_TOKEN,
    MESSAGE_MARKUP_TOKENS,
    SERVER_CONTEXT_WINDOW,
    context_window,
    count_tokens,
    prompt_tokens,
    render_chat,
    request_messages,
)


class Template:
    """A tokenizer double: its chat template writes "<role>text" turns and "<assistant>" to start a reply."""

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        text = "".join(f"<{m['role']}>{m['content']}" for m in messages)
        return text + ("<assistant>" if add_generation_prompt else "")


class WordEngine:
    """An engine double that renders with ``Template`` and counts words."""

    context_window = 1234

    def render_messages(self, messages):
        return render_chat(Template(), messages)

    def count_tokens(self, text):
        return len(text.split())


def test_a_trailing_assistant_message_is_continued_and_a_developer_message_is_a_system_one():
    messages = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert render_chat(Template(), messages) == "<system>Be brief.<user>Hi<assistant>"
    assert render_chat(Template(), [*messages, {"role": "assistant", "content": "answer:"}]).endswith(
        "<assistant>answer:"
    )


def test_a_dspy_request_becomes_its_system_text_and_messages():
    request = dspy.lm15.Request(model="m", system="Be brief.", messages=(dspy.lm15.Message.user("Hi"),))
    assert request_messages(request) == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


def test_a_local_engine_counts_the_rendered_template_and_a_server_lm_estimates_from_characters():
    messages = [{"role": "user", "content": "one two three"}]
    local = SimpleNamespace(engine=WordEngine())  # as load_lm returns, without a model to run
    assert prompt_tokens(local, messages) == len("<user>one two three<assistant>".split())
    assert count_tokens(local, "one two") == 2 and context_window(local) == 1234
    server = dspy.LM("openai/x", api_base="http://127.0.0.1:9/v1")
    assert count_tokens(server, "abcdefg") == math.ceil(7 / CHARS_PER_TOKEN)
    assert prompt_tokens(server, messages) == math.ceil(13 / CHARS_PER_TOKEN) + MESSAGE_MARKUP_TOKENS
    assert context_window(server) == SERVER_CONTEXT_WINDOW


def test_a_given_counter_counts_each_message_plus_its_markup_even_for_a_local_engine():
    local = SimpleNamespace(engine=WordEngine())  # as load_lm returns, without a model to run
    messages = [{"role": "system", "content": "a b"}, {"role": "user", "content": "c"}]
    assert prompt_tokens(local, messages, count=lambda text: len(text.split())) == 3 + 2 * MESSAGE_MARKUP_TOKENS
