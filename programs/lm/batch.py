"""The batch step of ``engine.TorchEngine``: the work on the model for the requests its worker runs together.

One concept in one file: every part below works on one batch and shares its state (the KV cache of the rows being
decoded, the prefix cache, the counters of the work done), so it is not split. The engine's worker thread decides
what runs when; a ``Batcher`` runs it: ``start`` prefills new jobs, ``merge`` joins them to the batch being
decoded, ``step`` picks every row's next token, releases the finished rows and decodes one step, and ``choose``
scores constrained choices.

- Rows are right-aligned (left padding, masked out). A running batch's KV buffers have spare rows, slack columns
  and room to grow (``kv.BufferLayer``): a joining request is copied into a spare row and a finished row is
  overwritten by the last row, so neither copies the batch's keys and values, which would cost as much as the
  decode steps it saves on long prompts.
- Prefix cache (``prefix_cache.PrefixCache``, a radix tree of token ids bounded in bytes): each row of a batch
  is prefilled in its own forward pass, after the keys/values of the longest prefix of its prompt that any
  earlier request computed (the system turn, the demonstrations, a multi-call method's growing prompt); then its
  whole prompt is stored, so the next row of the same batch already shares it. One pass per row also suits a
  CPU, where one pass over many long rows costs more per row than several smaller ones (``docs/engine.md``).
  ``prompt_tokens`` counts the prompt tokens sent, ``computed_tokens`` those the model computed.
- Greedy unless a job's ``temperature > 0``; a sampled job with a ``generator`` draws from it alone, so its
  tokens do not depend on the rows batched beside it. Stops are checked by decoding the last few tokens only
  (the engine cuts the text). A job that ``wants_text`` cannot end, by end-of-turn or by a stop string, before
  its first non-blank token; the blank tokens before it are dropped (``text_start``).
- Constrained choice: every option is appended to the prompt and scored by the sum of its tokens'
  log-probabilities. Each job's prompt is prefilled once (shared prefix reused), then all options of all jobs
  are scored in one more forward pass over that cache.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragscale.programs.lm.prefix_cache import PrefixCache

# a running batch's KV buffers leave room for requests that join it without copying its rows: spare rows up to
# max_batch_size, SLACK columns on the left for a joining prompt longer than the batch, ROOM columns on the right
SLACK, ROOM = 128, 256
SPARE_BYTES = 256 << 20
"""The most bytes a running batch's spare rows take: each is as long as the batch, so at long context they would
be gigabytes for requests that may never come; a request that finds no spare row is copied in (``merge``)."""
CHUNK_TOKENS = 512
"""A prompt is prefilled in passes of at most this many tokens, each after the keys of the ones before. A pass's
activations grow with its tokens (the MLP's by 4 to 6 times the hidden size each), so a long prompt in one pass
holds gigabytes of them; and measured, passes of 512 to 2,048 tokens prefill a 16k prompt at the same speed, one
pass at two thirds of it (``docs/engine.md``). While a batch is decoding it steps between two passes
(``Batcher.start``'s ``between``)."""


@dataclass(eq=False)
class Job:
    """One request in the batch step: its prompt and settings, what it generated and how it ended; ``done`` is set
    when it leaves (its caller is released)."""

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
class Running:
    """A batch being decoded: its live jobs, their KV cache, attention mask, next positions and last logits."""

    jobs: list[Job]
    cache: Any
    mask: Any
    next_pos: Any
    logits: Any


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    """The token ids that end a reply: the tokenizer's and the model's end tokens, and the usual end-of-turn ones."""
    ids = set()
    for source in (tokenizer.eos_token_id, getattr(model.generation_config, "eos_token_id", None)):
        ids.update(source if isinstance(source, list | tuple) else [source] if source is not None else [])
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|endoftext|>") if t in vocab)
    return ids


class Batcher:
    """Prefill, decode and score batches of jobs on ``model``; see the module docstring.

    ``tok_lock`` guards ``tokenizer``, which the engine's callers share (a lock of its own if none is given);
    ``prefixes`` is the prefix cache (none: every prompt is computed whole); ``decode`` the way a decode step runs
    (``decoder.DECODE_WAYS``).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_batch_size: int = 8,
        prefixes: PrefixCache | None = None,
        tok_lock: threading.Lock | None = None,
        decode: str = "auto",
        chunk_tokens: int = CHUNK_TOKENS,
    ) -> None:
        from ragscale.programs.lm.decoder import Decoder

        self.model, self.tokenizer = model, tokenizer
        self.decoder, self.chunk_tokens = Decoder(model, decode), chunk_tokens
        self.max_batch_size, self.prefixes = max_batch_size, prefixes
        self._tok_lock = threading.Lock() if tok_lock is None else tok_lock
        self._eos = _eos_ids(model, tokenizer)
        self._pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self._eos)
        self.batch_sizes: Counter[int] = Counter()  # batch size -> number of batches prefilled
        self.prompt_tokens = 0  # prompt tokens of the jobs prefilled (choices' options not included)
        self.computed_tokens = 0  # of those, the ones the model computed (the rest came from the prefix cache)
        self.joined = 0  # jobs that joined a batch already decoding
        # where the time goes: seconds spent in "prefill", "decode" and "choose", decode "steps" run and "rows"
        # decoded over them (rows / steps is the mean decode batch), and "joins in place" (see merge)
        self.work: Counter[str] = Counter()

    def _pick(self, logits: Any, jobs: list[Job]) -> list[int]:
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

    def _stopped(self, job: Job) -> bool:
        if not job.stops:
            return False
        tail_len = max(len(s) for s in job.stops) + 2
        with self._tok_lock:
            tail = self.tokenizer.decode(job.tokens[job.text_start :][-tail_len:], skip_special_tokens=True)
        return any(s and s in tail for s in job.stops)

    def _prefill(self, jobs: list[Job], running: bool = False) -> Any:
        """Prefill each row in its own forward passes after its longest cached prefix, into one batch's buffers.

        A generator: it yields after every row and after every pass of at most ``chunk_tokens``, so its caller
        can do other work between them (:meth:`start`), and returns the batch: (logits of each row's last position,
        KV cache, attention mask, next position ids). Rows are right-aligned (left padding, masked out and zeroed).
        The cache of a ``running`` batch (one that decodes and that later requests join) has room for them: spare
        rows (within ``SPARE_BYTES``), slack columns and ``ROOM`` more positions.
        """
        import torch
        from transformers import DynamicCache

        self.batch_sizes[len(jobs)] += 1
        width = max(len(j.ids) for j in jobs)
        capacity = width + max(j.max_new for j in jobs) + (ROOM if running else 0)
        spare, slack = (self._spare_rows(len(jobs), capacity), SLACK) if running else (0, 0)
        cache = self._buffers(len(jobs), capacity, spare, slack)
        end = slack + width  # every row ends here
        device = self.model.device
        mask = torch.zeros((len(jobs), width), dtype=torch.long, device=device)
        logits = []
        for row, job in enumerate(jobs):
            begin = end - len(job.ids)
            n, prefix = self.prefixes.match(job.ids, limit=len(job.ids) - 1) if self.prefixes else (0, None)
            views = [layer.row_view(row, begin, begin) for layer in cache.layers]
            for view, (k, v) in zip(views, prefix or (), strict=False):
                view.update(k, v)  # the cached prefix's keys/values, copied into this row
            part = DynamicCache(config=self.model.config)
            part.layers = views
            step = self.chunk_tokens
            for a in range(n, len(job.ids), step):
                b = min(a + step, len(job.ids))
                ids = torch.tensor([job.ids[a:b]], device=device)
                positions = torch.arange(a, b, device=device)[None]
                ones = torch.ones((1, b), dtype=torch.long, device=device)
                out = self._forward(ids, ones, positions, part, keep=1)
                if b < len(job.ids):
                    yield
            logits.append(out)
            mask[row, width - len(job.ids) :] = 1
            for layer in cache.layers:
                layer.zero_row(row, slack, begin)  # padding: masked out, but it must hold numbers, not NaN
            self.prompt_tokens += len(job.ids)
            self.computed_tokens += len(job.ids) - n
            if self.prefixes is not None:
                self.prefixes.insert(job.ids, [(view.keys, view.values) for view in views])
            yield
        for layer in cache.layers:
            layer.grow(end)
        next_pos = torch.tensor([[len(j.ids)] for j in jobs], device=device)
        return torch.cat(logits)[:, -1:, :], cache, mask, next_pos

    def _prefilled(self, jobs: list[Job], running: bool = False) -> tuple[Any, Any, Any, Any]:
        """:meth:`_prefill` run to its end."""
        return _drain(self._prefill(jobs, running))

    def _spare_rows(self, rows: int, capacity: int) -> int:
        """How many spare rows a running batch of ``rows`` rows of ``capacity`` positions gets: up to the batch
        size, within ``SPARE_BYTES``."""
        from ragscale.programs.lm.kv import position_bytes

        fits = SPARE_BYTES // (position_bytes(self.model) * (capacity + SLACK))
        return max(0, min(self.max_batch_size - rows, fits))

    def _buffers(self, rows: int, capacity: int, spare: int, slack: int) -> Any:
        """An empty cache of ``kv.BufferLayer``s for ``rows`` rows of ``capacity`` positions, allocated now so that
        the rows' passes of :meth:`_prefill` write into them."""
        from ragscale.programs.lm.kv import buffer_cache

        return buffer_cache(self.model, rows, capacity, spare_rows=spare, slack=slack)

    def _forward(self, ids: Any, mask: Any, positions: Any, cache: Any, keep: int) -> Any:
        """The model's logits for the last ``keep`` of ``ids`` (0: all), writing their keys/values to ``cache``."""
        from ragscale.programs.lm.decoder import model_logits

        return model_logits(self.model, ids, mask, positions, cache, keep)

    def choose(self, jobs: list[Job]) -> None:
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
            Job(j.ids[:c], max(len(o) - c for o in j.options), 0.0, None, ()) for j, c in zip(jobs, cuts, strict=True)
        ]
        owner = [i for i, job in enumerate(jobs) for _ in job.options]
        options = [
            (o, s, cuts[i]) for i, job in enumerate(jobs) for o, s in zip(job.options, job.option_starts, strict=True)
        ]
        width = max(len(o) - c for o, _, c in options)
        with torch.inference_mode():
            first, cache, mask, next_pos = self._prefilled(heads)
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

    def start(self, jobs: list[Job], running: bool = False, between: Any = None) -> Running:
        """A new batch of ``jobs``, prefilled; a ``running`` one (that later jobs join) has room for them.

        Each prompt is prefilled in passes of ``chunk_tokens``. With ``between`` (a function of no arguments: the
        engine's step of the batch that is decoding), ``between`` runs after each pass and each row, so rows that
        are decoding keep stepping while a long prompt is prefilled; its time is not counted as prefill.
        """
        passes = self._prefill(jobs, running=running)
        while True:
            began = time.perf_counter()
            try:
                next(passes)
            except StopIteration as done:
                logits, cache, mask, next_pos = done.value
                self.work["prefill"] += time.perf_counter() - began
                return Running(list(jobs), cache, mask, next_pos, logits[:, -1, :])
            self.work["prefill"] += time.perf_counter() - began
            if between is not None:
                between()

    def merge(self, running: Running | None, new: Running) -> Running:
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
            spare = self._spare_rows(len(jobs), width + room + ROOM)
            cache.layers = [merge_layers(a, b, width, width + room + ROOM, spare, SLACK) for a, b in pairs]
        masks = [torch.nn.functional.pad(m, (width - m.shape[1], 0)) for m in (running.mask, new.mask)]
        return Running(
            jobs,
            cache,
            torch.cat(masks),
            torch.cat([running.next_pos, new.next_pos]),
            torch.cat([running.logits, new.logits]),
        )

    def step(self, running: Running) -> Running | None:
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
        logits = self.decoder(feed, mask, next_pos, cache)
        self.work.update(decode=time.perf_counter() - start, steps=1, rows=len(keep))
        jobs = [running.jobs[r] for r in keep]
        return Running(jobs, cache, mask, next_pos + 1, logits)


def _drain(passes: Any) -> Any:
    """Run a generator to its end; its return value."""
    while True:
        try:
            next(passes)
        except StopIteration as done:
            return done.value
