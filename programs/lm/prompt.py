"""What a model reads and how long it is: chat-template rendering and token counting.

One place for what the engine, the context-window check, the sweep's estimator and the tests all need:

- ``render_chat(tokenizer, messages)``: the tokenizer's chat template over the messages. A trailing assistant
  message is continued, not closed: the template is rendered for the earlier messages with the generation prompt
  and the assistant text is appended verbatim (what the local engine feeds the model). ``request_messages`` turns
  a DSPy ``Request`` into those messages.
- ``count_tokens(lm, text)``: tokens of a text under the LM's tokenizer; for a server LM, whose tokenizer is not
  here, ceil(characters / ``CHARS_PER_TOKEN``).
- ``prompt_tokens(lm, messages)``: tokens of a whole request. A local engine renders its chat template and counts
  the result; otherwise each message's text is counted plus ``MESSAGE_MARKUP_TOKENS`` for its role markers.
- ``context_window(lm)``: the model's context length (read from the weights' config, or stated for a server).
- ``chat(lm, messages, **config)``: the reply text to OpenAI-style messages, sent through DSPy's normalised request
  API (``dspy.lm15.Request``): passing message dicts as ``lm(messages=...)`` is deprecated in DSPy 3.4.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dspy import lm15

SERVER_CONTEXT_WINDOW = 8192
"""The context window assumed for a server model unless ``load_lm(..., context_window=N)`` says otherwise."""

CHARS_PER_TOKEN = 4
"""``count_tokens`` for a server LM approximates ceil(characters / 4): the usual rate of BPE tokenizers on
English text. It is an estimate for budgeting prompts, not a bill."""

MESSAGE_MARKUP_TOKENS = 4
"""Tokens a chat template adds around each message (role markers, separators) when the template is not here."""


def render_chat(tokenizer: Any, messages: Sequence[Mapping[str, Any]]) -> str:
    """The prompt text of ``messages`` under ``tokenizer``'s chat template; a trailing assistant message is
    continued, not closed; a ``developer`` message is rendered as ``system``."""
    messages = [{**m, "role": "system" if m["role"] == "developer" else m["role"]} for m in messages]
    prefix = messages.pop()["content"] if messages[-1]["role"] == "assistant" else ""
    if not messages:
        return prefix
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return prompt + prefix


def request_messages(request: Any) -> list[dict[str, str]]:
    """The messages of a DSPy ``Request`` (its system text first, when it has one) as role/content dicts."""
    messages = []
    if request.system is not None:
        system = request.system if isinstance(request.system, str) else "".join(p.text for p in request.system)
        messages.append({"role": "system", "content": system})
    messages.extend({"role": m.role, "content": m.text or ""} for m in request.messages)
    return messages


def count_tokens(lm: Any, text: str) -> int:
    """Tokens of ``text`` under the LM's tokenizer; for a server LM, ceil(len(text) / CHARS_PER_TOKEN)."""
    engine = getattr(lm, "engine", None)
    if hasattr(engine, "count_tokens"):
        return engine.count_tokens(text)
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def prompt_tokens(lm: Any, messages: Sequence[Mapping[str, Any]], count: Callable[[str], int] | None = None) -> int:
    """Input tokens of one request: the LM's chat template rendered and counted when its engine can (a local
    model), else each message's text counted (by ``count``, default ``count_tokens(lm, text)``) plus
    ``MESSAGE_MARKUP_TOKENS``. A given ``count`` always takes the second way."""
    engine = getattr(lm, "engine", None)
    if count is None and hasattr(engine, "render_messages") and hasattr(engine, "count_tokens"):
        return engine.count_tokens(engine.render_messages(list(messages)))
    count = count or (lambda text: count_tokens(lm, text))
    return sum(count(str(m["content"])) + MESSAGE_MARKUP_TOKENS for m in messages)


def context_window(lm: Any) -> int:
    """The model's context length in tokens (read from the weights' config, or stated for a server)."""
    engine = getattr(lm, "engine", None)
    if hasattr(engine, "context_window"):
        return engine.context_window
    return getattr(lm, "context_window", None) or SERVER_CONTEXT_WINDOW


def chat(lm: Any, messages: Sequence[Mapping[str, str]], **config: Any) -> str:
    """``lm``'s reply text to ``messages`` ({"role", "content"} dicts: system, user, assistant; a trailing
    assistant message is continued by a local engine); ``config`` holds ``dspy.lm15.Config`` fields (max_tokens,
    stop, temperature, seed, response_format) over the LM's own settings of those fields."""
    return lm(chat_request(lm, messages, **config)).text or ""


def chat_request(lm: Any, messages: Sequence[Mapping[str, str]], **config: Any) -> Any:
    """The ``dspy.lm15.Request`` that ``chat`` sends (calling ``lm`` with it returns the whole ``Response``)."""
    fields = {f.name for f in dataclasses.fields(lm15.Config)}
    config = {**{k: v for k, v in getattr(lm, "kwargs", {}).items() if k in fields and v is not None}, **config}

    turns = {"user": lm15.Message.user, "assistant": lm15.Message.assistant}
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system") or None
    return lm15.Request(
        model=lm.model,
        messages=tuple(turns[m["role"]](m["content"]) for m in messages if m["role"] != "system"),
        system=system,
        config=lm15.Config(**config),
    )
