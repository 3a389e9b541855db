"""Language models for ragscale programs: a local torch engine inside DSPy, or an OpenAI-compatible server.

``load_lm("smollm2-135m")`` returns a ``dspy.LM`` whose engine runs the model in-process (see ``engine.py``);
``load_lm("openai/<model>", api_base=URL)`` returns one that talks to a vLLM/SGLang/Ollama server (``ServerLM``),
each call's wait bounded. Both report their calls to :func:`meter`. Loaded local engines are shared: loading the
same model again reuses the weights.
``ADAPTERS`` names the ways a prompt is formatted and parsed; ``make_adapter(name)`` builds one.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import dspy

from ragscale.process import REQUEST_TIMEOUT_S, go_offline
from ragscale.programs.lm.adapter import FieldAdapter
from ragscale.programs.lm.cache import restrict_cache
from ragscale.programs.lm.engine import TorchEngine
from ragscale.programs.lm.meter import CallRecord, MeteredLM, UsageMeter, meter
from ragscale.programs.lm.models import DEFAULT_LM, PRESETS
from ragscale.programs.lm.prompt import SERVER_CONTEXT_WINDOW, chat, context_window, count_tokens, prompt_tokens

__all__ = [
    "ADAPTERS",
    "DEFAULT_LM",
    "PRESETS",
    "SERVER_RETRIES",
    "CallRecord",
    "FieldAdapter",
    "ServerLM",
    "UsageMeter",
    "adapter_name",
    "chat",
    "context_window",
    "count_tokens",
    "lm_reference",
    "load_lm",
    "make_adapter",
    "meter",
    "prompt_tokens",
    "release_lm",
]

ADAPTERS: dict[str, Callable[[], dspy.Adapter]] = {
    # ours, for small local models: one output field per LM call, typed coercion, loud failures
    "field": FieldAdapter,
    # the same, continuing a trailing assistant message on a server too (vLLM, llama.cpp's server), so that a
    # served model sees the local engine's prompts; "field" gives servers the portable form instead
    "field-prefill": lambda: FieldAdapter(continuation="prefill"),
    # DSPy's; its silent retry through JSONAdapter doubles calls and hides parse failures, so it is off
    "chat": lambda: dspy.ChatAdapter(use_json_adapter_fallback=False),
    "json": dspy.JSONAdapter,
}


SERVER_RETRIES = 2
"""How many times a server call that failed in a way that may pass (no answer in time, a 5xx, a dropped connection)
is tried again, 1 s and then 2 s later: a call gives up after ``(1 + SERVER_RETRIES) x request_timeout + 3 s``."""


class ServerLM(MeteredLM):
    """An ``openai/<model>`` on an OpenAI-compatible server: each try of a call waits at most ``timeout`` seconds
    for its answer (``load_lm``'s ``request_timeout``), and a call that got none in any of its tries raises
    ``TimeoutError`` naming the wait and the server, so that a question it fails says why."""

    def __init__(self, model: str, *, timeout: float, **kwargs: Any) -> None:
        super().__init__(model, timeout=timeout, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except Exception as exc:
            self._raise_timeout(exc)
            raise

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().acall(*args, **kwargs)
        except Exception as exc:
            self._raise_timeout(exc)
            raise

    def _raise_timeout(self, exc: Exception) -> None:
        """Raise ``TimeoutError`` from ``exc`` when a wait for the server ran out on the way to it."""
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, TimeoutError):
            cause = cause.__cause__
        if cause is None:
            return
        raise TimeoutError(
            f"{self.model} at {self.kwargs.get('api_base')}: no answer within {self.kwargs.get('timeout'):g} s, "
            f"{self.num_retries + 1} tries (request_timeout, --request-timeout)"
        ) from exc


def make_adapter(name: str) -> dspy.Adapter:
    """The DSPy adapter named ``name`` (``ADAPTERS``); an unknown name raises ``ValueError`` listing the valid ones."""
    if name not in ADAPTERS:
        raise ValueError(f"unknown adapter {name!r}; valid choices: {', '.join(sorted(ADAPTERS))}")
    return ADAPTERS[name]()


def adapter_name(adapter: dspy.Adapter | None) -> str:
    """The name in ``ADAPTERS`` that ``make_adapter`` builds an adapter like ``adapter`` by (None: DSPy's default,
    ``chat``); ``ValueError`` for an adapter of another kind."""
    if isinstance(adapter, FieldAdapter):
        return "field-prefill" if adapter.continuation == "prefill" else "field"
    if isinstance(adapter, dspy.JSONAdapter):
        return "json"
    if adapter is None or isinstance(adapter, dspy.ChatAdapter):
        return "chat"
    raise ValueError(f"adapter {type(adapter).__name__} is none of ragscale's: {', '.join(sorted(ADAPTERS))}")


def lm_reference(lm: dspy.BaseLM) -> dict[str, Any]:
    """What ``load_lm`` loads ``lm`` again from: its name, its server's URL and the request settings it was made
    with (max_tokens, temperature); ``ValueError`` for an LM that is neither a local model nor a server model."""
    model = getattr(lm, "model", None)
    if not isinstance(model, str):
        raise ValueError(f"the LM {type(lm).__name__} names no model to load again")
    settings = {key: lm.kwargs[key] for key in ("max_tokens", "temperature") if key in (lm.kwargs or {})}
    if model.startswith("local/"):
        return {"lm": model.removeprefix("local/"), "api_base": None, **settings}
    api_base = (lm.kwargs or {}).get("api_base")
    if model.startswith("openai/") and api_base:
        return {"lm": model, "api_base": api_base, **settings}
    raise ValueError(f"the LM {model!r} is neither a local model nor an openai/<model> on a server (api_base)")


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
    weights: str | None = None,
    decode: str | None = None,
    request_timeout: float = REQUEST_TIMEOUT_S,
    **kwargs: Any,
) -> dspy.LM:
    """A ``dspy.LM`` for a preset (``PRESETS``), a model directory, a ``.gguf`` file, or ``openai/<model>``.

    ``cache=True`` lets DSPy's cache serve identical requests (reruns cost nothing), read with restricted unpickling
    (``cache.restrict_cache``); ``cache=False`` turns it off. The offline environment is set first
    (``ragscale.process``): the model hub and the price map are not contacted.
    ``openai/<model>`` needs ``api_base`` (e.g. ``http://localhost:8000/v1``) and accepts ``context_window=N``; each
    try of a call to it waits at most ``request_timeout`` seconds for the answer, and a call is tried
    ``1 + SERVER_RETRIES`` times (``ServerLM``).
    ``weights`` is :func:`~ragscale.programs.lm.models.load_model`'s: the layout of the linear layers on CPU
    (``WEIGHTS``). ``decode`` is how a local model's decode steps run (``decoder.DECODE_WAYS``; default
    ``engine.decode_way()``). Other keyword arguments become default request parameters of the LM.
    """
    go_offline()
    if cache:
        restrict_cache()
    common = {"max_tokens": max_tokens, "temperature": temperature, "cache": cache}
    if name.startswith("openai/"):
        if not api_base:
            raise ValueError(f"{name!r} is a server model: pass api_base= (the server's /v1 URL)")
        kwargs.setdefault("api_key", "unused")  # OpenAI-compatible local servers accept any key
        if "timeout" in kwargs:
            raise TypeError("load_lm: give a server's wait as request_timeout=, not timeout=")
        kwargs.setdefault("num_retries", SERVER_RETRIES)
        window = kwargs.pop("context_window", SERVER_CONTEXT_WINDOW)
        return ServerLM(name, api_base=api_base, context_window=window, timeout=request_timeout, **common, **kwargs)
    if api_base:
        raise ValueError(f"api_base is for 'openai/<model>' server models, not the local model {name!r}")
    engine: TorchEngine = TorchEngine.shared(
        name, device=device, dtype=dtype, max_batch_size=max_batch_size, weights=weights, decode=decode
    )
    return MeteredLM(
        f"local/{name}", engine=engine, num_retries=0, context_window=engine.context_window, **common, **kwargs
    )


def release_lm(lm: dspy.LM) -> None:
    """Free a local LM's weights for the rest of the process (``TorchEngine.release``): a teacher after compiling,
    whose memory the student's decode graphs can then take. An LM on a server holds none here."""
    engine = getattr(lm, "engine", None)
    if engine is not None:
        engine.release()
        gc.collect()
