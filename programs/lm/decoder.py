"""How the engine runs a decode step: the way chosen for the model's device and layout, the step compiled for the
row counts the memory allows, replayed as CUDA graphs on a GPU, and transformers' forward pass for the rest.

One concept in one file: the engine's choice of how to run a step. The step itself, its fused weights and the
arithmetic ``torch.compile`` takes whole, is ``step.py``'s (``DecodeStep``); replaying it as a CUDA graph is
``graphs.py``'s.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch

from ragscale.programs.lm.graphs import StepGraphs
from ragscale.programs.lm.layouts import DECODE_ROWS
from ragscale.programs.lm.step import BUCKETS, DecodeStep, supports

logger = logging.getLogger(__name__)

KEPT_FREE = 0.4
"""The share of the machine's memory that compiling the decode step for one more bucket must leave free."""


def memory() -> tuple[int, int]:
    """(available, total) bytes of this machine's memory (``/proc/meminfo``; where it is missing, plenty)."""
    try:
        fields = dict(line.split(":", 1) for line in open("/proc/meminfo", encoding="ascii"))
    except OSError:
        return 2**62, 2**62
    return (int(fields[name].split()[0]) * 1024 for name in ("MemAvailable", "MemTotal"))


DECODE_WAYS = ("auto", "hf", "static", "compiled")
"""How the engine runs a decode step: ``hf`` is transformers' forward, ``static`` :class:`DecodeStep` eager,
``compiled`` through ``torch.compile``; ``auto`` picks by device and layout (:func:`pick_way`)."""


def pick_way(model: Any, asked: str = "auto") -> tuple[str, int]:
    """The way ``asked`` means for ``model`` and the most rows it runs (more rows take transformers' forward).

    ``auto`` compiles the step on a CPU whose layout has int8 decode weights (``int8``, ``int8-bf16``), up to
    ``layouts.DECODE_ROWS`` rows: there inductor's int8 kernel reads the weights at the memory's speed, where
    torch's eager kernel is bound by its arithmetic; at more rows the layout's bfloat16 or float32 weights are
    faster and transformers' forward uses them. On a GPU ``auto`` is ``static``, replayed as CUDA graphs: the
    step is bound by the host's launches there, and a graph launches its kernels at once, with no minutes of
    compiling. Elsewhere (other layouts on a CPU) ``auto`` is ``hf``.
    """
    if asked not in DECODE_WAYS:
        raise ValueError(f"unknown decode way {asked!r}; valid choices: {', '.join(DECODE_WAYS)}")
    int8 = getattr(model, "weight_layout", None) in ("int8", "int8-bf16")
    if asked == "auto":
        fits = supports(model) is None
        if model.device.type == "cuda":
            asked = "static" if fits else "hf"
        else:
            asked = "compiled" if int8 and fits else "hf"
    if asked != "hf" and supports(model) is not None:
        raise ValueError(f"decode way {asked!r}: {supports(model)}")
    return asked, (DECODE_ROWS if int8 and model.device.type == "cpu" else BUCKETS[-1])


class Decoder:
    """One decode step of a batch in the engine's KV buffers, by the way :func:`pick_way` chose for its rows.

    ``decoder(feed, mask, positions, cache)`` takes what transformers' forward takes (``(rows, 1)`` tokens and
    positions, the ``(rows, width)`` attention mask with the new column, a cache of ``kv.BufferLayer``) and returns
    the ``(rows, vocabulary)`` logits, having written the step's keys and values. A compiled step that fails to
    compile is logged and replaced by transformers' forward for the rest of the engine's life. ``graphs`` (the
    default on a GPU): the step, compiled or not, is replayed as a CUDA graph per batch (``graphs.StepGraphs``).
    """

    def __init__(self, model: Any, way: str = "auto", *, graphs: bool | None = None) -> None:
        self.model = model
        self.way, self.max_rows = pick_way(model, way)
        self.step = DecodeStep(model, compile=self.way == "compiled") if self.way != "hf" else None
        if graphs is None:
            graphs = model.device.type == "cuda"
        if graphs and model.device.type != "cuda":
            raise ValueError(f"CUDA graphs replay on a GPU; this model is on {model.device}")
        self.graphs = None
        if graphs and self.step is not None:
            self.graphs = StepGraphs(self.step.step)
        self.wanted = [b for b in BUCKETS if b <= self.max_rows]  # the buckets to compile
        self.buckets = list(self.wanted)
        self.prepared = False
        self._compiled: list[int] = []  # the buckets compiled so far
        self._short = 0  # the bucket last left out for want of memory (0: none)

    def prepare(self) -> None:
        """Compile the step for every bucket it serves now, once, on a small cache of zeros, rather than at the
        first batch of each size (where a compile would stall the rows decoding).

        Each bucket's graph holds its own copy of the step's weights (frozen into it, packed for its kernels), so
        a bucket is compiled only while the memory left after its copy stays above ``KEPT_FREE`` of the machine's;
        the rows of the buckets left out take transformers' forward. Called again (the engine does whenever its
        worker goes from idle to busy), it compiles the buckets left out if the memory is there now: another
        model released (a teacher after compiling) gives this one its graphs."""
        if self.step is None or self.step.compiled is None or self.prepared:
            return
        from ragscale.programs.lm.kv import buffer_cache

        began, before = time.perf_counter(), len(self._compiled)
        device = self.model.device
        copy = self.step.weight_bytes()
        short = 0
        with torch.inference_mode():
            for rows in self.wanted[before:]:  # two cached positions of zeros, one step
                free, total = memory()
                if device.type == "cpu" and free - copy < KEPT_FREE * total:
                    if rows != self._short:  # said once, not at every later call
                        logger.warning(
                            "the decode step is not compiled for %d or more rows: a graph's copy of the weights "
                            "(%.1f GB) would leave %.1f of %.1f GB free; those rows take transformers' forward "
                            "until there is room",
                            rows, copy / 2**30, (free - copy) / 2**30, total / 2**30,
                        )  # fmt: skip
                    short = rows
                    break
                self.buckets, self.max_rows = [*self._compiled, rows], rows
                try:
                    cache = buffer_cache(self.model, rows, 4, filled=2)
                    feed = torch.zeros((rows, 1), dtype=torch.long, device=device)
                    mask = torch.ones((rows, 3), dtype=torch.long, device=device)
                    self(feed, mask, torch.full((rows, 1), 2, device=device), cache)
                except Exception:  # no graph for it, and none tried again: its rows take transformers' forward
                    logger.exception("the decode step could not be compiled for %d rows", rows)
                    short = 0
                    break
                self._compiled.append(rows)
        self.buckets, self.max_rows = list(self._compiled), max(self._compiled, default=0)
        self.prepared, self._short = not short, short
        if self.graphs is not None:  # recorded over the warm-up's buffers, which are gone
            self.graphs.clear()
        if len(self._compiled) > before:
            logger.info("compiled the decode step for %s rows in %.0f s", self._compiled, time.perf_counter() - began)

    def __call__(self, feed: Any, mask: Any, positions: Any, cache: Any) -> torch.Tensor:
        rows = feed.shape[0]
        if self.step is None or rows > self.max_rows:
            return self.forward(feed, mask, positions, cache)
        first = cache.layers[0]
        start, length = first.start, first.length
        if length >= first.capacity:
            raise RuntimeError(f"a KV buffer of {first.capacity} positions cannot hold {length + 1}")
        bucket = next(b for b in self.buckets if b >= rows)
        if bucket > first.rows + first.spare_rows:
            if self.step.compiled is not None:  # no spare rows to pad into, and no graph (nor weights) for more
                return self.forward(feed, mask, positions, cache)
            bucket = rows
        tokens, where = feed[:, 0], positions[:, 0]
        # the mask over the buffers' whole capacity; padding rows attend to their own new column only, so they
        # hold numbers, not NaN
        attend = torch.zeros((bucket, first.capacity), dtype=torch.bool, device=mask.device)
        attend[:rows, start : length + 1] = mask.bool()
        attend[rows:, length] = True
        if bucket > rows:
            tokens = torch.cat([tokens, tokens.new_zeros(bucket - rows)])
            where = torch.cat([where, where.new_zeros(bucket - rows)])
        keys = [layer._keys for layer in cache.layers]
        values = [layer._values for layer in cache.layers]
        column = torch.tensor([length], device=mask.device)
        try:
            logits = (self.graphs or self.step.step)(tokens, where, keys, values, column, attend)[:rows]
        except Exception:
            if self.step.compiled is None:
                raise
            logger.exception("the compiled decode step failed; decoding with transformers' forward from now on")
            self.step = self.graphs = None
            return self.forward(feed, mask, positions, cache)
        for layer in cache.layers:
            layer.grow(length + 1)
        return logits

    def forward(self, feed: Any, mask: Any, positions: Any, cache: Any) -> torch.Tensor:
        """transformers' forward pass for one step: the logits of each row's new token."""
        return model_logits(self.model, feed, mask, positions, cache, keep=1)[:, -1]


def model_logits(model: Any, ids: Any, mask: Any, positions: Any, cache: Any, keep: int) -> torch.Tensor:
    """transformers' forward pass: the logits of the last ``keep`` of ``ids`` (0: all), their keys and values
    written to ``cache``."""
    out = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=keep,
    )
    return out.logits
