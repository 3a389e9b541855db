"""A DSPy 3.4 engine that runs a transformers causal LM in-process, batching concurrent callers.

One concept in one file: a request's lifecycle, from DSPy's call to its caller's release. ``TorchEngine``
implements DSPy's engine contract (``complete(Request) -> Response``, ``stream``, ``close``) and is passed as
``dspy.LM(model, engine=...)``, so DSPy keeps owning caching, retries, history and callbacks. It turns a request
into a job, queues it, and turns the job's tokens into a response. What runs when is its worker thread's
(``worker.Worker``, which it extends: continuous batching, each request's failure its own, shutdown at exit); the
work on the model (prefill after cached prefixes, decode steps, scoring choices) is the batch step's,
``batch.Batcher``, which the worker drives.

- The prompt is the tokenizer's chat template. If the last message is an assistant message, the template is
  rendered for the earlier messages with the generation prompt and the assistant text is appended verbatim: the
  model continues it (the turn is not closed). A continued assistant turn cannot end before its first non-blank
  token, by end-of-turn or by a stop string, and the blank tokens before it are dropped: the caller wrote the
  start of the reply (an adapter's field header), so it asks for text. Small models otherwise often close the
  turn at once or open it with a blank line that hits a "\n\n" stop (an empty field, a parse failure).
- Greedy unless ``temperature > 0``; a sampled request with a ``seed`` draws from its own generator seeded with
  it, so its reply depends on its prompt and seed only, not on the requests batched beside it. ``max_tokens``
  and stop strings are honoured (text is cut before the stop string).
- ``complete`` runs in the caller's thread, queues the request and waits, at most ``request_timeout_s``; it
  raises ``EngineStoppedError`` at once if the worker thread is gone.
- Decode steps run the engine's own step where it is faster (``step.py``; the way is ``decoder.py``'s choice;
  ``decode``, ``$RAGSCALE_DECODE``).
- Constrained choice: a request whose ``response_format`` is a JSON schema of one string ``enum`` (what the
  adapter sends for a ``Literal``, ``Enum`` or ``bool`` output field) is not sampled: every option, appended to
  the prompt after a space, is scored by its log-likelihood. The reply is the most likely option as a JSON
  string, so it always parses, and its ``logprobs`` hold every option's score (``choice_logprobs``), which a
  call asking for logprobs gets. Any other JSON schema is refused (``UnsupportedFeatureError``) rather than
  ignored.
- Shutdown: ``close()`` stops the worker and joins it; ``release()`` also frees the weights for the rest of the
  process (a teacher after compiling).
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from typing import Any

from dspy.lm15 import (
    ContextLengthError,
    Message,
    Response,
    TokenLogprob,
    TopLogprob,
    UnsupportedFeatureError,
    Usage,
    response_to_events,
)

from ragscale.programs.lm.batch import Batcher, Job
from ragscale.programs.lm.models import layout_for, load_model, pick_device_dtype, resolve
from ragscale.programs.lm.prefix_cache import PrefixCache, common_prefix
from ragscale.programs.lm.prompt import render_chat, request_messages
from ragscale.programs.lm.worker import EngineStoppedError, Worker

__all__ = [
    "PREFIX_CACHE_BYTES",
    "EngineStoppedError",
    "TorchEngine",
    "choice_logprobs",
    "cut_at_stop",
    "decode_way",
    "enum_choices",
]

_SHARED: dict[tuple, TorchEngine] = {}
_SHARED_LOCK = threading.Lock()

PREFIX_CACHE_BYTES = 512 << 20
"""The prefix cache's default bound: 512 MiB of keys/values (about 21,000 tokens of Qwen2.5-0.5B in float32)."""


def choice_logprobs(choices: list[str], scores: list[float], best: int) -> Any:
    """A constrained choice's log-likelihoods as one ``TokenLogprob``: the chosen option, with every option and
    its score (the sum of its tokens' log-probabilities) as the top alternatives. What DSPy returns as an output's
    ``logprobs`` when a call asks for them (``logprobs=True``): a calibrated choice reads it."""
    top = tuple(TopLogprob(token=c, logprob=s) for c, s in zip(choices, scores, strict=True))
    return TokenLogprob(token=choices[best], logprob=scores[best], top=top)


def enum_choices(response_format: Any) -> list[str] | None:
    """The options of a ``response_format`` that is a JSON schema of one string enum, else None."""
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return None
    schema = response_format.get("schema") or response_format.get("json_schema", {}).get("schema") or {}
    options = schema.get("enum")
    if isinstance(options, list) and options and all(isinstance(o, str) for o in options):
        return options
    return None


def decode_way() -> str:
    """How an engine runs its decode steps unless told (``decoder.DECODE_WAYS``): ``$RAGSCALE_DECODE``, else
    ``auto``."""
    return os.environ.get("RAGSCALE_DECODE") or "auto"


def cut_at_stop(text: str, stops: tuple[str, ...]) -> tuple[str, bool]:
    """``text`` up to the earliest stop string, and whether one was found."""
    hits = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    return (text[: min(hits)], True) if hits else (text, False)


class TorchEngine(Worker):
    """Serve DSPy requests from a loaded transformers model; see the module docstring."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str = "local",
        max_batch_size: int = 8,
        wait_s: float = 0.01,
        prefix_cache: bool = True,
        min_prefix_tokens: int = 16,
        prefix_cache_bytes: int = PREFIX_CACHE_BYTES,
        decode: str | None = None,
        request_timeout_s: float | None = 3600.0,
    ) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.context_window = int(getattr(model.config, "max_position_embeddings", 2048))
        self._tok_lock = threading.Lock()
        batcher = Batcher(
            model,
            tokenizer,
            max_batch_size=max_batch_size,
            prefixes=PrefixCache(prefix_cache_bytes, min_prefix_tokens) if prefix_cache else None,
            tok_lock=self._tok_lock,
            decode=decode or decode_way(),
        )
        super().__init__(
            batcher, name=name, max_batch_size=max_batch_size, wait_s=wait_s, request_timeout_s=request_timeout_s
        )
        self._users = 0  # the callers shared() gave it to that have not released it

    @classmethod
    def shared(
        cls,
        name: str,
        *,
        device: str | None = None,
        dtype: str | None = None,
        max_batch_size: int = 8,
        weights: str | None = None,
        decode: str | None = None,
    ) -> TorchEngine:
        """The engine of a model loaded once per process: the same model, device, dtype, batch size, weight
        layout (the one ``weights`` means, ``models.layout_for``: the default, ``auto`` and the layout they name
        are one) and decode way (``decode``, else :func:`decode_way`) give the same engine (weights and worker
        shared). ``load_model`` says what the arguments mean. Each caller holds it until it calls :meth:`release`."""
        picked_device, torch_dtype = pick_device_dtype(device, dtype)
        layout = layout_for(weights, picked_device, torch_dtype)
        decode = decode or decode_way()
        key = (str(resolve(name)), picked_device, str(torch_dtype), max_batch_size, layout, decode)
        with _SHARED_LOCK:
            if key not in _SHARED:
                model, tokenizer = load_model(name, device=device, dtype=dtype, weights=layout)
                _SHARED[key] = cls(model, tokenizer, name=name, max_batch_size=max_batch_size, decode=decode)
            _SHARED[key]._users += 1
            return _SHARED[key]

    # -- what the batch step counted (kept by the batcher, read here) ------------------------------------------
    @property
    def prefixes(self) -> PrefixCache | None:
        """The prefix cache (None when disabled, or the engine released)."""
        return None if self.batcher is None else self.batcher.prefixes

    @property
    def batch_sizes(self) -> Counter[int]:
        """Batch size -> number of batches prefilled."""
        return self.batcher.batch_sizes

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens of the requests prefilled (choices' options not included)."""
        return self.batcher.prompt_tokens

    @property
    def computed_tokens(self) -> int:
        """Of the prompt tokens, those the model computed (the rest came from the prefix cache)."""
        return self.batcher.computed_tokens

    @property
    def joined(self) -> int:
        """Requests that joined a batch already decoding."""
        return self.batcher.joined

    @property
    def work(self) -> Counter[str]:
        """Where the worker's time goes (``Batcher.work``)."""
        return self.batcher.work

    # -- DSPy engine contract -------------------------------------------------------------------------------
    def complete(self, request: Any) -> Any:
        self._refuse_if_released()
        config = request.config
        max_new = config.max_tokens or 256
        choices = enum_choices(config.response_format)
        if choices is None and (config.response_format or {}).get("type") == "json_schema":
            raise UnsupportedFeatureError(
                f"{self.name}: the local engine constrains a JSON schema only when it is one string enum "
                f"(a closed choice); got {config.response_format!r}"
            )
        with self._start_lock:
            self._preparing += 1
        try:
            prompt = self.render(request)
            with self._tok_lock:
                ids = self.tokenizer(prompt, add_special_tokens=False).input_ids
                options = [self.tokenizer(f"{prompt} {c}", add_special_tokens=False).input_ids for c in choices or ()]
            longest = max((len(o) for o in options), default=len(ids) + max_new)
            if longest > self.context_window:
                raise ContextLengthError(
                    f"{self.name}: prompt of {len(ids)} tokens + max_tokens={max_new} exceeds the context window "
                    f"of {self.context_window} tokens"
                )
            job = Job(ids, max_new, float(config.temperature or 0.0), config.top_p, tuple(config.stop or ()))
            if job.temperature > 0 and config.seed is not None:
                import torch

                job.generator = torch.Generator(device=self.model.device).manual_seed(int(config.seed))
            job.wants_text = bool(request.messages) and request.messages[-1].role == "assistant"
            if choices:
                job.options = options
                job.option_starts = [min(common_prefix(ids, o), len(o) - 1) for o in options]
            self._submit(job)
        finally:
            with self._start_lock:
                self._preparing -= 1
        self._wait(job)
        if job.error is not None:
            raise job.error
        if choices:
            usage = Usage(input_tokens=len(ids), output_tokens=job.n_out)
            text = json.dumps(choices[job.tokens[0]])
            return Response(
                id=None,
                model=request.model,
                message=Message.assistant(text),
                finish_reason="stop",
                usage=usage,
                logprobs=(choice_logprobs(choices, job.scores, job.tokens[0]),),
            )
        with self._tok_lock:
            text = self.tokenizer.decode(job.tokens[job.text_start :], skip_special_tokens=True)
        text, stopped = cut_at_stop(text, job.stops)
        finish = "stop" if stopped else job.finish
        usage = Usage(input_tokens=len(ids), output_tokens=job.n_out)
        return Response(
            id=None, model=request.model, message=Message.assistant(text), finish_reason=finish, usage=usage
        )

    def stream(self, request: Any) -> Any:
        return response_to_events(self.complete(request))

    def release(self) -> None:
        """The caller is done with this engine: once every caller :meth:`shared` gave it to has released it (at
        once for an engine made directly), close the worker, drop the model, its decode graphs and its prefix
        cache, and take the engine out of the shared ones. A teacher after compiling so leaves its memory to the
        student's decode graphs, unless the student is the same engine. A request to a released engine raises
        ``EngineStoppedError``; a later ``shared`` call for the same model loads it again."""
        with _SHARED_LOCK:
            self._users = max(0, self._users - 1)
            if self._users or self._released:
                return
            for key in [key for key, engine in _SHARED.items() if engine is self]:
                del _SHARED[key]
        with self._start_lock:
            self._released = True  # from here no request starts a worker
        self.close()
        self.model = self.batcher = None

    def __deepcopy__(self, memo: dict) -> TorchEngine:
        return self  # the weights and the worker are shared, never copied

    def dump_state(self) -> dict:
        """What ``dspy.LM.dump_state`` saves for this engine: the model name and load settings, no weights, and the
        decode way that ran (a record only: :meth:`load_state` picks the way for the machine it loads on)."""
        return {
            "model": self.name,
            "device": str(self.model.device),
            "dtype": str(self.model.dtype).split(".")[-1],
            "max_batch_size": self.max_batch_size,
            "weights": getattr(self.model, "weight_layout", None),
            "decode": self.batcher.decoder.way,
        }

    @classmethod
    def load_state(cls, state: dict) -> TorchEngine:
        """The engine for a saved state, shared with any already loaded for the same model and settings."""
        return cls.shared(
            state["model"],
            device=state.get("device"),
            dtype=state.get("dtype"),
            max_batch_size=state.get("max_batch_size", 8),
            weights=state.get("weights"),
        )

    # -- prompts and tokens -----------------------------------------------------------------------------------
    def render(self, request: Any) -> str:
        """The prompt text for a DSPy ``Request`` (see :meth:`render_messages`)."""
        return self.render_messages(request_messages(request))

    def render_messages(self, messages: list[dict]) -> str:
        """Chat template over ``messages``; a trailing assistant message is continued, not closed (``render_chat``)."""
        return render_chat(self.tokenizer, messages)

    def count_tokens(self, text: str) -> int:
        with self._tok_lock:
            return len(self.tokenizer(text, add_special_tokens=False).input_ids)
