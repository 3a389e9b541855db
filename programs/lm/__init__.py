"""Language models for ragscale programs: a local torch engine inside DSPy, or an OpenAI-compatible server.

``load_lm("smollm2-135m")`` returns a ``dspy.LM`` whose engine runs the model in-process (see ``engine.py``);
``load_lm("openai/<model>", api_base=URL)`` returns one that talks to a vLLM/SGLang/Ollama server. Both report
their calls to :func:`meter`. Loaded local engines are shared: loading the same model again reuses the weights.
"""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING, Any

from ragscale.programs.lm.meter import CallRecord, MeteredLM, UsageMeter, meter
from ragscale.programs.lm.models import PRESETS

if TYPE_CHECKING:
    import dspy

    from ragscale.programs.lm.engine import TorchEngine

__all__ = ["PRESETS", "CallRecord", "UsageMeter", "context_window", "count_tokens", "load_lm", "meter"]

SERVER_CONTEXT_WINDOW = 8192
"""The context window assumed for a server model unless ``load_lm(..., context_window=N)`` says otherwise."""

CHARS_PER_TOKEN = 4
"""``count_tokens`` for a server LM approximates ceil(characters / 4): the usual rate of BPE tokenizers on
English text. It is an estimate for budgeting prompts, not a bill."""

_ENGINES: dict[tuple, TorchEngine] = {}
_ENGINES_LOCK = threading.Lock()


def _engine(
    name: str, device: str | None, dtype: str | None, max_batch_size: int, pack: bool | None = None
) -> TorchEngine:
    from ragscale.programs.lm.engine import TorchEngine
    from ragscale.programs.lm.models import load_model, pick_device_dtype, resolve

    path = resolve(name)
    key = (str(path), *map(str, pick_device_dtype(device, dtype)), max_batch_size, pack)
    with _ENGINES_LOCK:
        if key not in _ENGINES:
            model, tokenizer = load_model(name, device=device, dtype=dtype, pack=pack)
            _ENGINES[key] = TorchEngine(model, tokenizer, name=name, max_batch_size=max_batch_size)
        return _ENGINES[key]


def load_lm(
    name: str = "smollm2-135m",
    *,
    api_base: str | None = None,
    max_tokens: int = 256,
    temperature: float = 0.0,
    cache: bool = True,
    device: str | None = None,
    dtype: str | None = None,
    max_batch_size: int = 8,
    pack: bool | None = None,
    **kwargs: Any,
) -> dspy.LM:
    """A ``dspy.LM`` for a preset (``PRESETS``), a model directory, a ``.gguf`` file, or ``openai/<model>``.

    ``cache=True`` lets DSPy's cache serve identical requests (reruns cost nothing); ``cache=False`` turns it off.
    ``openai/<model>`` needs ``api_base`` (e.g. ``http://localhost:8000/v1``) and accepts ``context_window=N``.
    ``pack`` is :func:`~ragscale.programs.lm.models.load_model`'s: oneDNN-packed linear layers, by default for a
    float32 model on CPU. Other keyword arguments become default request parameters of the LM.
    """
    common = {"max_tokens": max_tokens, "temperature": temperature, "cache": cache}
    if name.startswith("openai/"):
        if not api_base:
            raise ValueError(f"{name!r} is a server model: pass api_base= (the server's /v1 URL)")
        kwargs.setdefault("api_key", "unused")  # OpenAI-compatible local servers accept any key
        window = kwargs.pop("context_window", SERVER_CONTEXT_WINDOW)
        return MeteredLM(name, api_base=api_base, context_window=window, **common, **kwargs)
    if api_base:
        raise ValueError(f"api_base is for 'openai/<model>' server models, not the local model {name!r}")
    engine = _engine(name, device, dtype, max_batch_size, pack)
    return MeteredLM(
        f"local/{name}", engine=engine, num_retries=0, context_window=engine.context_window, **common, **kwargs
    )


def count_tokens(lm: dspy.LM, text: str) -> int:
    """Tokens of ``text`` under the LM's tokenizer; for a server LM, ceil(len(text) / CHARS_PER_TOKEN)."""
    engine = getattr(lm, "engine", None)
    if hasattr(engine, "count_tokens"):
        return engine.count_tokens(text)
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def context_window(lm: dspy.LM) -> int:
    """The model's context length in tokens (read from the weights' config, or stated for a server)."""
    engine = getattr(lm, "engine", None)
    if hasattr(engine, "context_window"):
        return engine.context_window
    return getattr(lm, "context_window", None) or SERVER_CONTEXT_WINDOW
