"""A DSPy 3.4 engine that runs a transformers causal LM in-process, batching concurrent callers.

One concept in one file: every part below serves one loop (gather requests, prefill them, decode the running
batch, release each caller) and shares its state, so it is not split.

``TorchEngine`` implements DSPy's engine contract (``complete(Request) -> Response``, ``stream``, ``close``) and
is passed as ``dspy.LM(model, engine=...)``, so DSPy keeps owning caching, retries, history and callbacks.

- The prompt is the tokenizer's chat template. If the last message is an assistant message, the template is
  rendered for the earlier messages with the generation prompt and the assistant text is appended verbatim: the
  model continues it (the turn is not closed).
- Greedy unless ``temperature > 0``; a sampled request with a ``seed`` draws from its own generator seeded with
  it, so its reply depends on its prompt and seed only, not on the requests batched beside it. ``max_tokens``
  and stop strings are honoured (text is cut before the stop
  string). Stops are checked by decoding the last few tokens only. A continued assistant turn cannot end before
  its first non-blank token, by end-of-turn or by a stop string, and the blank tokens before it are dropped:
  the caller wrote the start of the reply (an adapter's field header), so it asks for text. Small models
  otherwise often close the turn at once or open it with a blank line that hits a "\n\n" stop (an empty field,
  a parse failure).
- Continuous batching: ``complete`` runs in the caller's thread, queues the request and waits; one worker thread
  gathers what arrives within ``wait_s`` (up to ``max_batch_size``) and runs it as one padded batch. Each row
  leaves the batch, and its caller gets its completion, as soon as it finishes; between two decode steps the
  requests queued meanwhile are prefilled and join the running batch (right-aligned, padding masked out). A
  running batch's KV buffers have spare rows, slack columns and room to grow (``kv.BufferLayer``): a joining
  request is copied into a spare row and a finished row is overwritten by the last row, so neither copies the
  batch's keys and values, which would cost as much as the decode steps it saves on long prompts.
- Prefix cache (``prefix_cache.PrefixCache``, a radix tree of token ids bounded in bytes): each row of a batch
  is prefilled in its own forward pass, after the keys/values of the longest prefix of its prompt that any
  earlier request computed (the system turn, the demonstrations, a multi-call method's growing prompt); then its
  whole prompt is stored, so the next row of the same batch already shares it. One pass per row also suits a
  CPU, where one pass over many long rows costs more per row than several smaller ones (``docs/engine.md``).
  ``prompt_tokens`` counts the prompt tokens sent, ``computed_tokens`` those the model computed.
- Constrained choice: a request whose ``response_format`` is a JSON schema of one string ``enum`` (what the
  adapter sends for a ``Literal``, ``Enum`` or ``bool`` output field) is not sampled. Every option is appended to
  the prompt (after a space) and scored by the sum of its tokens' log-probabilities. Each request's prompt is
  prefilled once (shared prefix reused), then all options of all such requests are scored in one more forward
  pass over that cache; the reply is the most likely option as a JSON string, so it always parses, and its
  ``logprobs`` hold every option's score (``choice_logprobs``), which a call asking for logprobs gets. Any other
  JSON schema is refused (``UnsupportedFeatureError``) rather than ignored.
- Shutdown: ``close()`` stops the worker and joins it. At interpreter exit an ``atexit`` hook (``_stop_workers``)
  closes every engine whose worker runs, after the forward pass it is in: a worker thread left running into the
  interpreter's finalization aborts the process (see ``_stop_workers``).
"""

from __future__ import annotations

import atexit
import json
import logging
import queue
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

_SHARED: dict[tuple, TorchEngine] = {}
_SHARED_LOCK = threading.Lock()
_RUNNING: set[TorchEngine] = set()  # engines whose worker thread was started and not closed (under _RUNNING_LOCK)
_RUNNING_LOCK = threading.Lock()  # not _SHARED_LOCK, which shared() holds while a model loads
_EXITING = threading.Event()  # set when the interpreter exits: no worker starts after it

# a running batch's KV buffers leave room for requests that join it without copying its rows: spare rows up to
# max_batch_size, SLACK columns on the left for a joining prompt longer than the batch, ROOM columns on the right
SLACK, ROOM = 128, 256
PREFIX_CACHE_BYTES = 512 << 20
"""The prefix cache's default bound: 512 MiB of keys/values (about 21,000 tokens of Qwen2.5-0.5B in float32)."""


@dataclass(eq=False)
class _Job:
    ids: list[int]
    max_new: int
    temperature: float
    top_p: float | None
    stops: tuple[str, ...]
    generator: Any = None  # a sampled request's own torch.Generator, seeded with its seed
    options: list[list[int]] | None = None  # constrained choice: prompt + option token ids, one list per option
    option_starts: list[int] | None = None  # where each option's own tokens begin
    scores: list[float] | None = None  # constrained choice: each option's log-likelihood
    wants_text: bool = False  # a continued assistant turn before its first non-blank token: it cannot end yet
    text_start: int = 0  # where the text begins in ``tokens`` (blank tokens before it are dropped)
    tokens: list[int] = field(default_factory=list)
    n_out: int = 0
    finish: str = "length"
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


@dataclass(eq=False)
class _Running:
    """A batch being decoded: its live jobs, their KV cache, attention mask, next positions and last logits."""

    jobs: list[_Job]
    cache: Any
    mask: Any
    next_pos: Any
    logits: Any


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


class EngineStoppedError(RuntimeError):
    """A request the engine did not finish because it was closed without finishing (the interpreter exiting)."""


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
    ) -> None:
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.max_batch_size, self.wait_s = max_batch_size, wait_s
        from ragscale.programs.lm.prefix_cache import PrefixCache

        self.prefixes = PrefixCache(prefix_cache_bytes, min_prefix_tokens) if prefix_cache else None
        self.context_window = int(getattr(model.config, "max_position_embeddings", 2048))
        self._eos = self._eos_ids()
        self._pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self._eos)
        self._tok_lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._halt = False  # close(finish_running=False): stop after the current step, fail what is unfinished
        self._preparing = 0  # callers inside complete() that have not queued their request yet
        self.batch_sizes: Counter[int] = Counter()  # batch size -> number of batches run
        self.prompt_tokens = 0  # prompt tokens of the requests prefilled (choices' options not included)
        self.computed_tokens = 0  # of those, the ones the model computed (the rest came from the prefix cache)
        self.joined = 0  # requests that joined a batch already decoding
        # where the worker's time goes: seconds spent in "prefill", "decode" and "choose", decode "steps" run and
        # "rows" decoded over them (rows / steps is the mean decode batch), and "joins in place" (see _merge)
        self.work: Counter[str] = Counter()

    @classmethod
    def shared(
        cls,
        name: str,
        *,
        device: str | None = None,
        dtype: str | None = None,
        max_batch_size: int = 8,
        weights: str | None = None,
    ) -> TorchEngine:
        """The engine of a model loaded once per process: the same model, device, dtype, batch size and weight
        layout (the one ``weights`` means, ``models.layout_for``: the default, ``auto`` and the layout they name
        are one) give the same engine (weights and worker shared). ``load_model`` says what the arguments mean."""
        from ragscale.programs.lm.models import layout_for, load_model, pick_device_dtype, resolve

        picked_device, torch_dtype = pick_device_dtype(device, dtype)
        layout = layout_for(weights, picked_device, torch_dtype)
        key = (str(resolve(name)), picked_device, str(torch_dtype), max_batch_size, layout)
        with _SHARED_LOCK:
            if key not in _SHARED:
                model, tokenizer = load_model(name, device=device, dtype=dtype, weights=layout)
                _SHARED[key] = cls(model, tokenizer, name=name, max_batch_size=max_batch_size)
            return _SHARED[key]

    def _eos_ids(self) -> set[int]:
        ids = set()
        for source in (self.tokenizer.eos_token_id, getattr(self.model.generation_config, "eos_token_id", None)):
            ids.update(source if isinstance(source, list | tuple) else [source] if source is not None else [])
        vocab = self.tokenizer.get_vocab()
        ids.update(vocab[t] for t in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|endoftext|>") if t in vocab)
        return ids

    # -- DSPy engine contract -------------------------------------------------------------------------------
    def complete(self, request: Any) -> Any:
        from dspy.lm15 import ContextLengthError, Message, Response, UnsupportedFeatureError, Usage

        from ragscale.programs.lm.prefix_cache import common_prefix

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
            job = _Job(ids, max_new, float(config.temperature or 0.0), config.top_p, tuple(config.stop or ()))
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
        job.done.wait()
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

    def __deepcopy__(self, memo: dict) -> TorchEngine:
        return self  # the weights and the worker are shared, never copied

    def dump_state(self) -> dict:
        """What ``dspy.LM.dump_state`` saves for this engine: the model name and load settings, no weights."""
        return {
            "model": self.name,
            "device": str(self.model.device),
            "dtype": str(self.model.dtype).split(".")[-1],
            "max_batch_size": self.max_batch_size,
            "weights": getattr(self.model, "weight_layout", None),
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
    def _submit(self, job: _Job) -> None:
        with self._start_lock:
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

    def _gather(self, first: _Job | None, room: int) -> tuple[list[_Job], bool]:
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
        from ragscale.programs.lm.openmp import release_openmp_threads

        running: _Running | None = None
        closing = False  # close() was called: finish what is running, take nothing new
        while True:
            if self._halt:
                self._abandon(running)
                return
            first = None
            if running is None:
                if self._queue.empty():
                    release_openmp_threads()  # an idle worker's helper threads slow every other torch thread
                first = None if closing else self._queue.get()
                if first is None:
                    return
            room = self.max_batch_size - (len(running.jobs) if running else 0)
            new, stop = self._gather(first, room) if not closing else ([], False)
            closing = closing or stop
            choices, generations = [j for j in new if j.options], [j for j in new if not j.options]
            try:
                self.choose(choices)
            except Exception as exc:
                self._fail(choices, exc)
            finally:
                self._finish(choices)
            try:
                if generations:
                    running = self._merge(running, self._start(generations, running=running is None))
                if running is not None:
                    running = self._step(running)
            except Exception as exc:
                failed = (running.jobs if running else []) + [j for j in generations if not j.done.is_set()]
                self._fail(failed, exc)
                self._finish(failed)
                running = None

    def _abandon(self, running: _Running | None) -> None:
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
    def _fail(jobs: list[_Job], exc: BaseException) -> None:
        """Hand ``exc`` to every caller of ``jobs``, which re-raises it."""
        logger.exception("generation failed for a batch of %d", len(jobs), exc_info=exc)
        for job in jobs:
            job.error = exc

    @staticmethod
    def _finish(jobs: list[_Job]) -> None:
        for job in jobs:
            job.done.set()

    # -- generation -----------------------------------------------------------------------------------------------
    def _pick(self, logits: Any, jobs: list[_Job]) -> list[int]:
        import torch

        picked = logits.argmax(-1)
        for i, job in enumerate(jobs):
            if job.temperature > 0:
                probs = torch.softmax(logits[i].float() / job.temperature, -1)
                if job.top_p is not None and job.top_p < 1:
                    sorted_p, order = probs.sort(descending=True)
                    keep = sorted_p.cumsum(-1) - sorted_p < job.top_p
                    probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
                picked[i] = torch.multinomial(probs, 1, generator=job.generator)[0]
        return picked.tolist()

    def _stopped(self, job: _Job) -> bool:
        if not job.stops:
            return False
        tail_len = max(len(s) for s in job.stops) + 2
        with self._tok_lock:
            tail = self.tokenizer.decode(job.tokens[job.text_start :][-tail_len:], skip_special_tokens=True)
        return any(s and s in tail for s in job.stops)

    def _prefill(self, jobs: list[_Job], running: bool = False) -> tuple[Any, Any, Any, Any]:
        """Prefill each row in its own forward pass after its longest cached prefix, into one batch's buffers.

        Rows are right-aligned (left padding, masked out and zeroed). Returns (logits of each row's last position,
        KV cache, attention mask, next position ids). The cache of a ``running`` batch (one that decodes and that
        later requests join) has room for them: spare rows, slack columns and ``ROOM`` more positions.
        """
        import torch
        from transformers import DynamicCache

        self.batch_sizes[len(jobs)] += 1
        width = max(len(j.ids) for j in jobs)
        capacity = width + max(j.max_new for j in jobs) + (ROOM if running else 0)
        spare, slack = (max(0, self.max_batch_size - len(jobs)), SLACK) if running else (0, 0)
        cache = self._buffers(len(jobs), capacity, spare, slack)
        end = slack + width  # every row ends here
        mask = torch.zeros((len(jobs), width), dtype=torch.long, device=self.model.device)
        logits = []
        for row, job in enumerate(jobs):
            begin = end - len(job.ids)
            n, prefix = self.prefixes.match(job.ids, limit=len(job.ids) - 1) if self.prefixes else (0, None)
            views = [layer.row_view(row, begin, begin) for layer in cache.layers]
            for view, (k, v) in zip(views, prefix or (), strict=False):
                view.update(k, v)  # the cached prefix's keys/values, copied into this row
            part = DynamicCache(config=self.model.config)
            part.layers = views
            ids = torch.tensor([job.ids[n:]], device=self.model.device)
            positions = torch.arange(n, len(job.ids), device=self.model.device)[None]
            ones = torch.ones((1, len(job.ids)), dtype=torch.long, device=self.model.device)
            logits.append(self._forward(ids, ones, positions, part, keep=1))
            mask[row, width - len(job.ids) :] = 1
            for layer in cache.layers:
                layer.zero_row(row, slack, begin)  # padding: masked out, but it must hold numbers, not NaN
            self.prompt_tokens += len(job.ids)
            self.computed_tokens += len(job.ids) - n
            if self.prefixes is not None:
                self.prefixes.insert(job.ids, [(view.keys, view.values) for view in views])
        for layer in cache.layers:
            layer.grow(end)
        next_pos = torch.tensor([[len(j.ids)] for j in jobs], device=self.model.device)
        return torch.cat(logits)[:, -1:, :], cache, mask, next_pos

    def _buffers(self, rows: int, capacity: int, spare: int, slack: int) -> Any:
        """An empty cache of ``kv.BufferLayer``s for ``rows`` rows of ``capacity`` positions, allocated now so that
        the rows' passes of :meth:`_prefill` write into them."""
        import torch
        from transformers import DynamicCache

        from ragscale.programs.lm.kv import BufferLayer

        cache = DynamicCache(config=self.model.config)
        config = self.model.config
        dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        empty = torch.empty((1, config.num_key_value_heads, 0, dim), dtype=self.model.dtype, device=self.model.device)
        cache.layers = [BufferLayer(rows, capacity, empty, empty, spare_rows=spare, slack=slack) for _ in cache.layers]
        return cache

    def _forward(self, ids: Any, mask: Any, positions: Any, cache: Any, keep: int) -> Any:
        """The model's logits for the last ``keep`` of ``ids`` (0: all), writing their keys/values to ``cache``."""
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=keep,
        )
        return out.logits

    def choose(self, jobs: list[_Job]) -> None:
        """Set each constrained-choice job's ``tokens`` to ``[index of its most likely option]``.

        Two forward passes for the whole batch: the prompts (up to where their options diverge from them) are
        prefilled once, one row per job; then each job's row is repeated once per option and every option's
        tokens are fed at once, right-padded. The score of an option is the sum of its own tokens'
        log-probabilities (``job.scores``).
        """
        if not jobs:
            return
        import torch

        began = time.perf_counter()

        # where each job's options leave its prompt (usually the prompt's end; earlier if a token merges)
        cuts = [max(1, min(j.option_starts)) for j in jobs]
        heads = [
            _Job(j.ids[:c], max(len(o) - c for o in j.options), 0.0, None, ()) for j, c in zip(jobs, cuts, strict=True)
        ]
        owner = [i for i, job in enumerate(jobs) for _ in job.options]
        options = [
            (o, s, cuts[i]) for i, job in enumerate(jobs) for o, s in zip(job.options, job.option_starts, strict=True)
        ]
        width = max(len(o) - c for o, _, c in options)
        with torch.inference_mode():
            first, cache, mask, next_pos = self._prefill(heads)
            first = first[:, -1, :].float().log_softmax(-1)[owner]  # predicts each option's token at its cut
            index = torch.tensor(owner, device=mask.device)
            cache.batch_select_indices(index)
            feed = torch.full((len(options), width), self._pad, dtype=torch.long)
            grown = torch.zeros((len(options), width), dtype=torch.long)
            for r, (o, _, c) in enumerate(options):
                feed[r, : len(o) - c], grown[r, : len(o) - c] = torch.tensor(o[c:]), 1
            mask = torch.cat([mask[index], grown.to(mask.device)], dim=-1)
            positions = next_pos[index] + torch.arange(width, device=mask.device)
            logits = self._forward(feed.to(mask.device), mask, positions, cache, keep=0)
            rest = logits.float().log_softmax(-1)  # rest[r, k] predicts option token c + k + 1
        scores = []
        for r, (o, s, c) in enumerate(options):
            logp = [first[r, o[c]]] + [rest[r, t - c - 1, o[t]] for t in range(c + 1, len(o))]
            scores.append(float(sum(logp[max(s, c) - c :])))
        for job in jobs:
            n = len(job.options)
            job.scores, scores = scores[:n], scores[n:]
            best = max(range(n), key=job.scores.__getitem__)
            job.tokens, job.n_out, job.finish = [best], len(job.options[best]) - job.option_starts[best], "stop"
        self.work["choose"] += time.perf_counter() - began

    def _start(self, jobs: list[_Job], running: bool = False) -> _Running:
        start = time.perf_counter()
        logits, cache, mask, next_pos = self._prefill(jobs, running=running)
        self.work["prefill"] += time.perf_counter() - start
        return _Running(list(jobs), cache, mask, next_pos, logits[:, -1, :])

    def _merge(self, running: _Running | None, new: _Running) -> _Running:
        """One batch of ``running``'s rows and ``new``'s, right-aligned (padding masked out).

        ``new``'s rows are copied into ``running``'s spare rows when they fit; otherwise both are copied into new
        buffers (with room for later joins again).
        """
        if running is None:
            return new
        import torch

        from ragscale.programs.lm.kv import merge_layers

        jobs = running.jobs + new.jobs
        self.joined += len(new.jobs)
        room = max(j.max_new - len(j.tokens) for j in jobs)
        cache, pairs = running.cache, list(zip(running.cache.layers, new.cache.layers, strict=True))
        if pairs[0][0].can_join(pairs[0][1], room):  # every layer has the same shape
            grown = max(a.join(b) for a, b in pairs)  # the same for every layer
            width = running.mask.shape[1] + grown
            self.work["joins in place"] += 1
        else:
            width = max(running.mask.shape[1], new.mask.shape[1])
            spare = max(0, self.max_batch_size - len(jobs))
            cache.layers = [merge_layers(a, b, width, width + room + ROOM, spare, SLACK) for a, b in pairs]
        masks = [torch.nn.functional.pad(m, (width - m.shape[1], 0)) for m in (running.mask, new.mask)]
        return _Running(
            jobs,
            cache,
            torch.cat(masks),
            torch.cat([running.next_pos, new.next_pos]),
            torch.cat([running.logits, new.logits]),
        )

    def _step(self, running: _Running) -> _Running | None:
        """Pick every row's next token; finished rows leave (their callers are released); decode one step."""
        import torch

        from ragscale.programs.lm.kv import survivors

        for row, job in enumerate(running.jobs):
            if job.wants_text:
                running.logits[row, list(self._eos)] = float("-inf")
        picked = self._pick(running.logits, running.jobs)
        keep = []
        for row, (job, token) in enumerate(zip(running.jobs, picked, strict=True)):
            job.n_out += 1
            if token in self._eos:
                job.finish = "stop"
            else:
                job.tokens.append(token)
                if job.wants_text:
                    with self._tok_lock:
                        job.wants_text = not self.tokenizer.decode([token], skip_special_tokens=True).strip()
                    job.text_start = len(job.tokens) - (0 if job.wants_text else 1)
                if not job.wants_text and self._stopped(job):
                    job.finish = "stop"
                elif len(job.tokens) < job.max_new:
                    keep.append(row)
                    continue
            job.done.set()
        if not keep:
            return None
        cache, mask, next_pos = running.cache, running.mask, running.next_pos
        if len(keep) < len(running.jobs):  # the last rows move into the finished rows' places
            keep = survivors(keep)
            for layer in cache.layers:
                layer.keep_rows(keep)
            index = torch.tensor(keep, device=mask.device)
            mask, next_pos = mask[index], next_pos[index]
            unused = int(mask.any(0).int().argmax())  # leading columns that were only the finished rows'
            if unused:
                mask = mask[:, unused:]
                for layer in cache.layers:
                    layer.trim(unused)
        mask = torch.cat([mask, mask.new_ones((len(keep), 1))], dim=-1)
        feed = torch.tensor([picked[r] for r in keep], device=mask.device)[:, None]
        start = time.perf_counter()
        logits = self._forward(feed, mask, next_pos, cache, keep=1)
        self.work.update(decode=time.perf_counter() - start, steps=1, rows=len(keep))
        jobs = [running.jobs[r] for r in keep]
        return _Running(jobs, cache, mask, next_pos + 1, logits[:, -1, :])
