"""A DSPy 3.4 engine that runs a transformers causal LM in-process, batching concurrent callers.

``TorchEngine`` implements DSPy's engine contract (``complete(Request) -> Response``, ``stream``, ``close``) and
is passed as ``dspy.LM(model, engine=...)``, so DSPy keeps owning caching, retries, history and callbacks.

- The prompt is the tokenizer's chat template. If the last message is an assistant message, the template is
  rendered for the earlier messages with the generation prompt and the assistant text is appended verbatim: the
  model continues it (the turn is not closed).
- Greedy unless ``temperature > 0``; ``max_tokens`` and stop strings are honoured (text is cut before the stop
  string). Stops are checked by decoding the last few tokens only.
- Dynamic batching: ``complete`` runs in the caller's thread, queues the request and waits; one worker thread
  gathers what arrives within ``wait_s`` (up to ``max_batch_size``), runs it as one padded batch, and hands each
  completion back. Rows leave the batch as they finish.
- Shared-prefix KV cache: the longest token prefix common to the batch (or to a prefix retained from earlier
  calls) is prefilled once; every row reuses its keys/values. Rows are laid out as prefix + padding + suffix, with
  the padding masked out and positions continuing after the prefix.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class _Job:
    ids: list[int]
    max_new: int
    temperature: float
    top_p: float | None
    stops: tuple[str, ...]
    tokens: list[int] = field(default_factory=list)
    n_out: int = 0
    finish: str = "length"
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


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
        min_prefix_tokens: int = 32,
    ) -> None:
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.max_batch_size, self.wait_s = max_batch_size, wait_s
        self.prefix_cache, self.min_prefix_tokens = prefix_cache, min_prefix_tokens
        self.context_window = int(getattr(model.config, "max_position_embeddings", 2048))
        self._eos = self._eos_ids()
        self._pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self._eos)
        self._tok_lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._retained: tuple[list[int], Any] | None = None  # (token ids, batch-1 KV cache) from earlier calls
        self.batch_sizes: Counter[int] = Counter()  # batch size -> number of batches run
        self.prefix_tokens_reused = 0  # prompt tokens served from a shared prefix instead of recomputed

    def _eos_ids(self) -> set[int]:
        ids = set()
        for source in (self.tokenizer.eos_token_id, getattr(self.model.generation_config, "eos_token_id", None)):
            ids.update(source if isinstance(source, list | tuple) else [source] if source is not None else [])
        vocab = self.tokenizer.get_vocab()
        ids.update(vocab[t] for t in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|endoftext|>") if t in vocab)
        return ids

    # -- DSPy engine contract -------------------------------------------------------------------------------
    def complete(self, request: Any) -> Any:
        from dspy.lm15 import ContextLengthError, Message, Response, Usage

        config = request.config
        with self._tok_lock:
            ids = self.tokenizer(self.render(request), add_special_tokens=False).input_ids
        max_new = config.max_tokens or 256
        if len(ids) + max_new > self.context_window:
            raise ContextLengthError(
                f"{self.name}: prompt of {len(ids)} tokens + max_tokens={max_new} exceeds the context window "
                f"of {self.context_window} tokens"
            )
        job = _Job(ids, max_new, float(config.temperature or 0.0), config.top_p, tuple(config.stop or ()))
        self._submit(job)
        job.done.wait()
        if job.error is not None:
            raise job.error
        with self._tok_lock:
            text = self.tokenizer.decode(job.tokens, skip_special_tokens=True)
        text, stopped = cut_at_stop(text, job.stops)
        finish = "stop" if stopped else job.finish
        usage = Usage(input_tokens=len(ids), output_tokens=job.n_out)
        return Response(
            id=None, model=request.model, message=Message.assistant(text), finish_reason=finish, usage=usage
        )

    def stream(self, request: Any) -> Any:
        from dspy.lm15 import response_to_events

        return response_to_events(self.complete(request))

    def close(self) -> None:
        """Stop the worker thread; a later call starts a new one."""
        with self._start_lock:
            if self._worker is not None:
                self._queue.put(None)
                self._worker.join()
                self._worker = None
            self._retained = None

    def __deepcopy__(self, memo: dict) -> TorchEngine:
        return self  # the weights and the worker are shared, never copied

    # -- prompts and tokens -----------------------------------------------------------------------------------
    def render(self, request: Any) -> str:
        """The prompt text for ``request``: chat template, or continuation of a trailing assistant message."""
        messages = []
        if request.system is not None:
            system = request.system if isinstance(request.system, str) else "".join(p.text for p in request.system)
            messages.append({"role": "system", "content": system})
        for m in request.messages:
            role = "system" if m.role == "developer" else m.role
            messages.append({"role": role, "content": m.text or ""})
        prefix = ""
        if messages[-1]["role"] == "assistant":
            prefix = messages.pop()["content"]
        if not messages:
            return prefix
        prompt = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return prompt + prefix

    def count_tokens(self, text: str) -> int:
        with self._tok_lock:
            return len(self.tokenizer(text, add_special_tokens=False).input_ids)

    # -- batching -------------------------------------------------------------------------------------------------
    def _submit(self, job: _Job) -> None:
        with self._start_lock:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._run, name=f"TorchEngine-{self.name}", daemon=True)
                self._worker.start()
            self._queue.put(job)

    def _run(self) -> None:
        import time

        while True:
            first = self._queue.get()
            if first is None:
                return
            batch, stop = [first], False
            deadline = time.monotonic() + self.wait_s
            while len(batch) < self.max_batch_size:
                try:
                    job = self._queue.get(timeout=max(deadline - time.monotonic(), 0.0))
                except queue.Empty:
                    break
                if job is None:
                    stop = True
                    break
                batch.append(job)
            try:
                self.generate(batch)
            except Exception as exc:  # handed to every caller of the batch, which re-raises it
                logger.exception("generation failed for a batch of %d", len(batch))
                for job in batch:
                    job.error = exc
            finally:
                for job in batch:
                    job.done.set()
            if stop:
                return

    # -- generation -----------------------------------------------------------------------------------------------
    def _prefix(self, jobs: list[_Job]) -> tuple[int, Any]:
        """(length, batch-1 KV cache) of a prefix every job shares, or (0, None)."""
        if not self.prefix_cache:
            return 0, None
        shortest = min(len(j.ids) for j in jobs) - 1  # every row keeps at least one token to prefill
        common = min([_common_prefix(jobs[0].ids, j.ids) for j in jobs[1:]] + [shortest])
        if self._retained is not None:
            ids, cache = self._retained
            n = min(common, _common_prefix(ids, jobs[0].ids))
            if n >= self.min_prefix_tokens:
                if n < len(ids):
                    cache.crop(n - len(ids))
                    self._retained = (ids[:n], cache)
                return n, cache
        if common < self.min_prefix_tokens:
            return 0, None
        import torch
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        ids = torch.tensor([jobs[0].ids[:common]], device=self.model.device)
        self.model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        self._retained = (jobs[0].ids[:common], cache)
        return common, cache

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
                picked[i] = torch.multinomial(probs, 1)[0]
        return picked.tolist()

    def _stopped(self, job: _Job) -> bool:
        if not job.stops:
            return False
        tail_len = max(len(s) for s in job.stops) + 2
        with self._tok_lock:
            tail = self.tokenizer.decode(job.tokens[-tail_len:], skip_special_tokens=True)
        return any(s and s in tail for s in job.stops)

    def generate(self, jobs: list[_Job]) -> None:
        """Run ``jobs`` as one batch: shared prefix once, then padded suffixes, then token-by-token decoding."""
        import torch
        from transformers import DynamicCache

        device, model = self.model.device, self.model
        with torch.inference_mode():
            n_prefix, prefix = self._prefix(jobs)
            self.batch_sizes[len(jobs)] += 1
            self.prefix_tokens_reused += n_prefix * len(jobs)
            rows = [j.ids[n_prefix:] for j in jobs]
            width = max(len(r) for r in rows)
            ids = torch.full((len(jobs), width), self._pad, dtype=torch.long)
            mask = torch.zeros((len(jobs), n_prefix + width), dtype=torch.long)
            mask[:, :n_prefix] = 1
            for i, row in enumerate(rows):
                ids[i, width - len(row) :] = torch.tensor(row)
                mask[i, n_prefix + width - len(row) :] = 1
            ids, mask = ids.to(device), mask.to(device)
            positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, n_prefix:]
            if prefix is None:
                cache = DynamicCache(config=model.config)
            else:  # a fresh cache per batch: the retained prefix tensors are never written to
                cache = DynamicCache(
                    [(k.expand(len(jobs), -1, -1, -1), v.expand(len(jobs), -1, -1, -1)) for k, v, *_ in prefix],
                    config=model.config,
                )
            out = model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            live = list(range(len(jobs)))
            next_pos = positions[:, -1:] + 1
            for _ in range(max(j.max_new for j in jobs)):
                picked = self._pick(out.logits[:, -1, :], [jobs[i] for i in live])
                keep = []
                for row, (i, token) in enumerate(zip(live, picked, strict=True)):
                    job = jobs[i]
                    job.n_out += 1
                    if token in self._eos:
                        job.finish = "stop"
                        continue
                    job.tokens.append(token)
                    if self._stopped(job):
                        job.finish = "stop"
                    elif len(job.tokens) < job.max_new:
                        keep.append(row)
                if not keep:
                    break
                if len(keep) < len(live):
                    index = torch.tensor(keep, device=device)
                    cache.batch_select_indices(index)
                    mask, next_pos = mask[index], next_pos[index]
                    picked = [picked[r] for r in keep]
                    live = [live[r] for r in keep]
                mask = torch.cat([mask, mask.new_ones((len(live), 1))], dim=-1)
                feed = torch.tensor(picked, device=device)[:, None]
                out = model(
                    input_ids=feed,
                    attention_mask=mask,
                    position_ids=next_pos,
                    past_key_values=cache,
                    use_cache=True,
                    logits_to_keep=1,
                )
                next_pos = next_pos + 1
