"""A DSPy 3.4 engine that runs a transformers causal LM in-process, batching concurrent callers.

One concept in one file: a request's lifecycle, from DSPy's call to its caller's release. ``TorchEngine``
implements DSPy's engine contract (``complete(Request) -> Response``, ``stream``, ``close``) and is passed as
``dspy.LM(model, engine=...)``, so DSPy keeps owning caching, retries, history and callbacks. It turns a request
into a job, queues it, and turns the job's tokens into a response; the work on the model (prefill after cached
prefixes, decode steps, scoring choices) is the batch step's, ``batch.Batcher``, which the engine's worker thread
drives.

- The prompt is the tokenizer's chat template. If the last message is an assistant message, the template is
  rendered for the earlier messages with the generation prompt and the assistant text is appended verbatim: the
  model continues it (the turn is not closed). A continued assistant turn cannot end before its first non-blank
  token, by end-of-turn or by a stop string, and the blank tokens before it are dropped: the caller wrote the
  start of the reply (an adapter's field header), so it asks for text. Small models otherwise often close the
  turn at once or open it with a blank line that hits a "\n\n" stop (an empty field, a parse failure).
- Greedy unless ``temperature > 0``; a sampled request with a ``seed`` draws from its own generator seeded with
  it, so its reply depends on its prompt and seed only, not on the requests batched beside it. ``max_tokens``
  and stop strings are honoured (text is cut before the stop string).
- Continuous batching: ``complete`` runs in the caller's thread, queues the request and waits; one worker thread
  gathers what arrives within ``wait_s`` (up to ``max_batch_size``) and runs it as one padded batch. Each row
  leaves the batch, and its caller gets its completion, as soon as it finishes; between two decode steps the
  requests queued meanwhile are prefilled and join the running batch. While they are prefilled, the running
  batch keeps stepping between chunks of their prompts (``batch.CHUNK_TOKENS``), so a long prompt joining does
  not stall the rows that are decoding.
- Requests cannot take each other down: a request whose prefill fails (out of memory, a bad input) fails alone,
  the batch's other new requests are prefilled one by one; a failing decode step fails the rows still decoding,
  never a row that already finished; the worker goes on with the next requests. ``complete`` waits at most
  ``request_timeout_s`` and raises ``EngineStoppedError`` at once if the worker thread is gone.
- Decode steps run the engine's own step where it is faster (``step.py``; ``decode``, ``$RAGSCALE_DECODE``).
- Constrained choice: a request whose ``response_format`` is a JSON schema of one string ``enum`` (what the
  adapter sends for a ``Literal``, ``Enum`` or ``bool`` output field) is not sampled: every option, appended to
  the prompt after a space, is scored by its log-likelihood. The reply is the most likely option as a JSON
  string, so it always parses, and its ``logprobs`` hold every option's score (``choice_logprobs``), which a
  call asking for logprobs gets. Any other JSON schema is refused (``UnsupportedFeatureError``) rather than
  ignored.
- Shutdown: ``close()`` stops the worker and joins it; ``release()`` also frees the weights for the rest of the
  process (a teacher after compiling). At interpreter exit an ``atexit`` hook (``_stop_workers``)
  closes every engine whose worker runs, after the forward pass it is in: a worker thread left running into the
  interpreter's finalization aborts the process (see ``_stop_workers``).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from ragscale.programs.lm.batch import Batcher, Job, Running

if TYPE_CHECKING:
    from ragscale.programs.lm.prefix_cache import PrefixCache

logger = logging.getLogger(__name__)

_SHARED: dict[tuple, TorchEngine] = {}
_SHARED_LOCK = threading.Lock()
_RUNNING: set[TorchEngine] = set()  # engines whose worker thread was started and not closed (under _RUNNING_LOCK)
_RUNNING_LOCK = threading.Lock()  # not _SHARED_LOCK, which shared() holds while a model loads
_EXITING = threading.Event()  # set when the interpreter exits: no worker starts after it

PREFIX_CACHE_BYTES = 512 << 20
"""The prefix cache's default bound: 512 MiB of keys/values (about 21,000 tokens of Qwen2.5-0.5B in float32)."""


def choice_logprobs(choices: list[str], scores: list[float], best: int) -> Any:
    """A constrained choice's log-likelihoods as one ``TokenLogprob``: the chosen option, with every option and
    its score (the sum of its tokens' log-probabilities) as the top alternatives. What DSPy returns as an output's
    ``logprobs`` when a call asks for them (``logprobs=True``): a calibrated choice reads it."""
    from dspy.lm15 import TokenLogprob, TopLogprob

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
    """How an engine runs its decode steps unless told (``step.DECODE_WAYS``): ``$RAGSCALE_DECODE``, else
    ``auto``."""
    return os.environ.get("RAGSCALE_DECODE") or "auto"


class EngineStoppedError(RuntimeError):
    """A request the engine did not finish: it was closed without finishing (the interpreter exiting), or
    released (``TorchEngine.release``)."""


def _stop_workers() -> None:
    """Stop every engine's worker thread and wait for it, when the interpreter exits (an ``atexit`` hook).

    A daemon thread still alive when the interpreter finalizes is ended by ``pthread_exit`` as soon as it takes
    the GIL back. A worker inside a torch op takes it back in C++ code that cannot be unwound, and the process
    aborts ("terminate called without an active exception", exit 134) after the program itself succeeded. So the
    workers stop here, before finalization, after the forward pass they are in; what they had not finished fails.
    """
    _EXITING.set()
    with _RUNNING_LOCK:
        engines = list(_RUNNING)
    for engine in engines:
        engine.close(finish_running=False)


atexit.register(_stop_workers)


def cut_at_stop(text: str, stops: tuple[str, ...]) -> tuple[str, bool]:
    """``text`` up to the earliest stop string, and whether one was found."""
    hits = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    return (text[: min(hits)], True) if hits else (text, False)


class TorchEngine:
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
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.max_batch_size, self.wait_s, self.request_timeout_s = max_batch_size, wait_s, request_timeout_s
        from ragscale.programs.lm.prefix_cache import PrefixCache

        self.context_window = int(getattr(model.config, "max_position_embeddings", 2048))
        self._tok_lock = threading.Lock()
        self.batcher = Batcher(
            model,
            tokenizer,
            max_batch_size=max_batch_size,
            prefixes=PrefixCache(prefix_cache_bytes, min_prefix_tokens) if prefix_cache else None,
            tok_lock=self._tok_lock,
            decode=decode or decode_way(),
        )
        self._active: Running | None = None  # the batch the worker is decoding
        self._start_lock = threading.Lock()
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._halt = False  # close(finish_running=False): stop after the current step, fail what is unfinished
        self._preparing = 0  # callers inside complete() that have not queued their request yet
        self._users = 0  # the callers shared() gave it to that have not released it
        self._released = False  # release() freed the model: no request is served any more

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
        from ragscale.programs.lm.models import layout_for, load_model, pick_device_dtype, resolve

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
        from dspy.lm15 import ContextLengthError, Message, Response, UnsupportedFeatureError, Usage

        from ragscale.programs.lm.prefix_cache import common_prefix

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

    def _wait(self, job: Job) -> None:
        """Wait for ``job``, at most ``request_timeout_s``; raise ``EngineStoppedError`` at once if the worker
        thread is gone with the job unfinished (it died, or the engine was closed), rather than wait forever."""
        deadline = None if self.request_timeout_s is None else time.monotonic() + self.request_timeout_s
        while not job.done.wait(timeout=0.2):
            worker = self._worker
            if (worker is None or not worker.is_alive()) and not job.done.is_set():
                raise EngineStoppedError(
                    f"{self.name}: the engine's worker thread is not running (it died or the engine was closed); "
                    "this request was not finished"
                )
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.name}: no completion within {self.request_timeout_s:g} s (request_timeout_s); the "
                    f"worker is decoding {len(self._active.jobs) if self._active else 0} row(s)"
                )

    def stream(self, request: Any) -> Any:
        from dspy.lm15 import response_to_events

        return response_to_events(self.complete(request))

    def close(self, *, finish_running: bool = True) -> None:
        """Stop the worker thread and wait for it; a later call starts a new one.

        The worker first finishes the batch it is decoding; with ``finish_running=False`` it stops after the
        forward pass it is in, and the requests it has not finished (running or queued) raise
        ``EngineStoppedError`` in their callers.
        """
        with self._start_lock:
            if self._worker is not None:
                self._halt = not finish_running
                self._queue.put(None)
                self._worker.join()
                self._worker = None
                self._halt = False
            if self.prefixes is not None:
                self.prefixes.clear()
        with _RUNNING_LOCK:
            _RUNNING.discard(self)

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

    def _refuse_if_released(self) -> None:
        if self._released:
            raise EngineStoppedError(f"{self.name}: this engine was released (release()); load the model again")

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
        from ragscale.programs.lm.prompt import request_messages

        return self.render_messages(request_messages(request))

    def render_messages(self, messages: list[dict]) -> str:
        """Chat template over ``messages``; a trailing assistant message is continued, not closed (``render_chat``)."""
        from ragscale.programs.lm.prompt import render_chat

        return render_chat(self.tokenizer, messages)

    def count_tokens(self, text: str) -> int:
        with self._tok_lock:
            return len(self.tokenizer(text, add_special_tokens=False).input_ids)

    # -- batching -------------------------------------------------------------------------------------------------
    def _submit(self, job: Job) -> None:
        with self._start_lock:
            self._refuse_if_released()  # again under the lock: release() may have run since complete() began
            if self._worker is None or not self._worker.is_alive():
                if _EXITING.is_set():
                    raise EngineStoppedError(f"{self.name}: the interpreter is exiting; no request is served now")
                # a daemon thread, so the interpreter's shutdown does not wait for an idle worker forever;
                # _stop_workers joins it before the interpreter finalizes
                self._worker = threading.Thread(target=self._run, name=f"TorchEngine-{self.name}", daemon=True)
                self._worker.start()
                with _RUNNING_LOCK:
                    _RUNNING.add(self)
            self._queue.put(job)

    def _gather(self, first: Job | None, room: int) -> tuple[list[Job], bool]:
        """Up to ``room`` queued jobs and whether the engine was closed.

        An idle engine (``first`` given) waits ``wait_s`` for more to arrive (up to 10x that while callers are still
        tokenizing); a running batch takes only what is already queued, so its decoding never waits.
        """
        batch, start = ([first] if first is not None else []), time.monotonic()
        while len(batch) < room:
            try:
                job = self._queue.get(timeout=0.002) if first is not None else self._queue.get_nowait()
            except queue.Empty:
                waited = time.monotonic() - start
                if first is None or waited >= 10 * self.wait_s or (waited >= self.wait_s and not self._preparing):
                    break
                continue
            if job is None:
                return batch, True
            batch.append(job)
        return batch, False

    def _run(self) -> None:
        """Continuous batching: between two decode steps, queued requests join the running batch."""
        import torch

        with torch.inference_mode():
            self._serve()

    def _serve(self) -> None:
        from ragscale.process import release_openmp_threads

        self._active = None
        closing = False  # close() was called: finish what is running, take nothing new
        while True:
            if self._halt:
                self._abandon(self._active)
                return
            first = None
            if self._active is None:
                if self._queue.empty():
                    release_openmp_threads()  # an idle worker's helper threads slow every other torch thread
                first = None if closing else self._queue.get()
                if first is None:
                    return
                # a compiled step compiles here, before the first batch; buckets left out for want of memory, at
                # a later batch once there is room
                self.batcher.decoder.prepare()
            room = self.max_batch_size - (len(self._active.jobs) if self._active else 0)
            new, stop = self._gather(first, room) if not closing else ([], False)
            closing = closing or stop
            choices, generations = [j for j in new if j.options], [j for j in new if not j.options]
            try:
                self.batcher.choose(choices)
            except Exception as exc:
                self._fail(choices, exc)
            finally:
                self._finish(choices)
            if generations:
                batch = self._start_each(generations)
                if batch is not None:
                    try:
                        self._active = self.batcher.merge(self._active, batch)
                    except Exception as exc:  # the new rows fail; the batch that was decoding goes on
                        self._fail(batch.jobs, exc)
            self._step_active()

    def _step_active(self) -> None:
        """One decode step of the batch being decoded; if it fails, the rows still decoding get the error (the
        rows it finished keep their completions) and the worker goes on with the next requests."""
        if self._active is None:
            return
        try:
            self._active = self.batcher.step(self._active)
        except Exception as exc:
            jobs, self._active = self._active.jobs, None
            self._fail(jobs, exc)

    def _start_each(self, jobs: list[Job]) -> Running | None:
        """The new batch of ``jobs``, prefilled while the batch being decoded keeps stepping between chunks, with
        each request's failure its own: if the batch's prefill fails, its requests are prefilled one by one, and
        only those that fail alone get their error (over capacity, out of memory in a prefill). None if every one
        failed."""
        running = self._active is None  # a batch that will decode gets room for later joins

        def between() -> None:
            self._step_active()
            self.work["steps between prefill chunks"] += 1

        def start(batch: list[Job]) -> Running:
            return self.batcher.start(batch, running, between=between if self._active else None)

        try:
            return start(jobs)
        except Exception as exc:
            if len(jobs) == 1:
                self._fail(jobs, exc)
                return None
        batch = None
        for job in jobs:
            try:
                batch = self.batcher.merge(batch, start([job]))
            except Exception as exc:
                self._fail([job], exc)
        return batch

    def _abandon(self, running: Running | None) -> None:
        """Fail the running batch's requests and every queued one with ``EngineStoppedError``."""
        jobs = list(running.jobs) if running is not None else []
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                jobs.append(job)
        error = EngineStoppedError(f"{self.name}: the engine was closed before this request finished")
        for job in jobs:
            job.error = error
        self._finish(jobs)

    @staticmethod
    def _fail(jobs: list[Job], exc: BaseException) -> None:
        """Hand ``exc`` to the caller of every job of ``jobs`` not finished yet and release it; the caller re-raises
        it (a finished job's caller may already be reading its completion: it never gets another row's error)."""
        jobs = [job for job in jobs if not job.done.is_set()]
        logger.exception("generation failed for %d request(s)", len(jobs), exc_info=exc)
        for job in jobs:
            job.error = exc
            job.done.set()

    @staticmethod
    def _finish(jobs: list[Job]) -> None:
        for job in jobs:
            job.done.set()
