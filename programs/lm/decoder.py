"""How the engine runs a decode step: the way chosen for the model's device and layout, the step compiled for a row
count once its decoding has paid for the compile, replayed as CUDA graphs on a GPU, and transformers' forward pass
for the rest.

One concept in one file: the engine's choice of how to run a step. The step itself, its fused weights and the
arithmetic ``torch.compile`` takes whole, is ``step.py``'s (``DecodeStep``); replaying it as a CUDA graph is
``graphs.py``'s.

Compiling a row count costs seconds to a minute, where a short run decodes for less than that, so on a CPU a row
count is compiled only once the time its eager steps lost would have paid for the compile, as a ski rental: each
eager step of the row count adds half its time (what a compiled step saves, ``SAVES``) to what it has lost, and
when that reaches the compile's expected cost the step compiles. The expected cost is the last compile's of the
same model, layout, row count and torch, kept in ``steps.json`` beside inductor's cache on disk (read back from
there, a compile costs seconds), else ``FIRST_COMPILE_S``. A run that pays for no compile decodes eagerly from its
first step; a long one loses at most as much as it would have spent compiling.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from ragscale.programs.lm.graphs import StepGraphs
from ragscale.programs.lm.layouts import DECODE_ROWS
from ragscale.programs.lm.step import BUCKETS, DecodeStep, supports

logger = logging.getLogger(__name__)

SAVES = 0.5
"""The share of an eager step's time that a compiled step saves: about half on the Zen 4 EPYC of
``docs/engine.md`` (40 against 20 ms a row); less where torch's eager int8 kernel is fast."""
FIRST_COMPILE_S = 60.0
"""The expected cost of a row count's first compile, where no earlier one is recorded."""


DECODE_WAYS = ("auto", "hf", "static", "compiled")
"""How the engine runs a decode step: ``hf`` is transformers' forward, ``static`` :class:`DecodeStep` eager,
``compiled`` through ``torch.compile``; ``auto`` picks by device and layout (:func:`pick_way`)."""


def pick_way(model: Any, asked: str = "auto") -> tuple[str, int]:
    """The way ``asked`` means for ``model`` and the most rows it runs (more rows take transformers' forward).

    ``auto`` compiles the step on a CPU whose layout has quantised decode weights (``int8``, ``int8-bf16``,
    ``int4-bf16``), up to ``layouts.DECODE_ROWS`` rows: there inductor's kernels read the weights at the memory's
    speed, where torch's eager int8 kernel is bound by its arithmetic; at more rows the layout's bfloat16 or
    float32 weights are faster and transformers' forward uses them. On a GPU ``auto`` is ``static``, replayed as
    CUDA graphs: the step is bound by the host's launches there, and a graph launches its kernels at once, with no
    minutes of compiling. Elsewhere (other layouts on a CPU) ``auto`` is ``hf``.
    """
    if asked not in DECODE_WAYS:
        raise ValueError(f"unknown decode way {asked!r}; valid choices: {', '.join(DECODE_WAYS)}")
    quantised = getattr(model, "weight_layout", None) in ("int8", "int8-bf16", "int4-bf16")
    if asked == "auto":
        fits = supports(model) is None
        if model.device.type == "cuda":
            asked = "static" if fits else "hf"
        else:
            asked = "compiled" if quantised and fits else "hf"
    if asked != "hf" and supports(model) is not None:
        raise ValueError(f"decode way {asked!r}: {supports(model)}")
    return asked, (DECODE_ROWS if quantised and model.device.type == "cpu" else BUCKETS[-1])


class Decoder:
    """One decode step of a batch in the engine's KV buffers, by the way :func:`pick_way` chose for its rows.

    ``decoder(feed, mask, positions, cache)`` takes what transformers' forward takes (``(rows, 1)`` tokens and
    positions, the ``(rows, width)`` attention mask with the new column, a cache of ``kv.BufferLayer``) and returns
    the ``(rows, vocabulary)`` logits, having written the step's keys and values.

    A compiled step runs the step eagerly for a row count until its compile pays (the module docstring), then
    compiles it there, once: ``compile_now`` compiles every row count at once instead (benchmarks, a GPU). A row
    count that fails to compile is logged and stays eager; a compiled step that fails while decoding is logged and
    replaced by transformers' forward for the rest of the engine's life. ``graphs`` (the default on a GPU): the
    step, compiled or not, is replayed as a CUDA graph per batch (``graphs.StepGraphs``).
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
        self.buckets = [b for b in BUCKETS if b <= self.max_rows]
        self.compiled: set[int] = set()  # the buckets whose graph is compiled
        self.failed: set[int] = set()  # the buckets whose compile failed: eager for good
        self.lost: Counter[int] = Counter()  # seconds each bucket's eager steps lost against a compiled step
        self.compile_s: dict[int, float] = {}  # what each bucket's compile took

    @property
    def compiles(self) -> bool:
        """Whether this decoder compiles its step (the ``compiled`` way and it has not failed while decoding)."""
        return self.step is not None and self.step.compiled is not None

    def prepare(self) -> None:
        """What the engine's worker calls before a batch: on a GPU, compile every row count now (its CUDA graphs
        are recorded over the step, and a compile would stall their recording); on a CPU nothing, each row count
        compiling once its decoding pays for it."""
        if self.graphs is not None:
            self.compile_now()

    def compile_now(self, rows: int | None = None) -> None:
        """Compile the step now for the row count ``rows`` runs as (None: every one not compiled yet)."""
        for bucket in self.buckets if rows is None else [next(b for b in self.buckets if b >= rows)]:
            self._compile(bucket)

    def _compile(self, bucket: int) -> None:
        """Compile the step for ``bucket`` rows, once: two cached positions of zeros, one step; recorded."""
        if not self.compiles or bucket in self.compiled or bucket in self.failed:
            return
        from ragscale.programs.lm.kv import buffer_cache

        began = time.perf_counter()
        device = self.model.device
        try:
            with torch.inference_mode():
                cache = buffer_cache(self.model, bucket, 4, filled=2)
                keys = [layer._keys for layer in cache.layers]
                values = [layer._values for layer in cache.layers]
                mask = torch.zeros((bucket, 4), dtype=torch.bool, device=device)
                mask[:, :3] = True
                zeros = torch.zeros(bucket, dtype=torch.long, device=device)
                self.step.step(zeros, zeros + 2, keys, values, torch.tensor([2], device=device), mask)
        except Exception:  # no graph for it, and none tried again: its rows stay eager
            logger.exception("the decode step could not be compiled for %d rows; they decode eagerly", bucket)
            self.failed.add(bucket)
            return
        self.compiled.add(bucket)
        self.compile_s[bucket] = seconds = time.perf_counter() - began
        record_compile(self._key(bucket), seconds)
        logger.info("compiled the decode step for %d rows in %.1f s", bucket, seconds)

    def _key(self, bucket: int) -> str:
        """What a compile's cost is recorded under: the model, its layout, the row count and torch's version."""
        name = getattr(self.model.config, "_name_or_path", "") or type(self.model).__name__
        layout = getattr(self.model, "weight_layout", "dense")
        return f"{name}|{layout}|{self.model.device.type}|{bucket} rows|torch {torch.__version__}"

    def _pays(self, bucket: int, seconds: float) -> None:
        """Count an eager step of ``seconds`` for ``bucket``; compile it once what it lost reaches the compile's
        expected cost."""
        self.lost[bucket] += SAVES * seconds
        if self.lost[bucket] >= recorded_compile_s(self._key(bucket)):
            self._compile(bucket)

    def __call__(self, feed: Any, mask: Any, positions: Any, cache: Any) -> torch.Tensor:
        rows = feed.shape[0]
        if self.step is None or rows > self.max_rows:
            return self.forward(feed, mask, positions, cache)
        first = cache.layers[0]
        start, length = first.start, first.length
        if length >= first.capacity:
            raise RuntimeError(f"a KV buffer of {first.capacity} positions cannot hold {length + 1}")
        bucket = next(b for b in self.buckets if b >= rows)
        compiled = self.compiles and bucket in self.compiled and bucket <= first.rows + first.spare_rows
        if not compiled and self.graphs is None:
            bucket = rows  # the eager step runs any row count, no padding
        # the mask over the buffers' whole capacity; padding rows attend to their own new column only, so they
        # hold numbers, not NaN
        attend = torch.zeros((bucket, first.capacity), dtype=torch.bool, device=mask.device)
        attend[:rows, start : length + 1] = mask.bool()
        attend[rows:, length] = True
        tokens, where = feed[:, 0], positions[:, 0]
        if bucket > rows:
            tokens = torch.cat([tokens, tokens.new_zeros(bucket - rows)])
            where = torch.cat([where, where.new_zeros(bucket - rows)])
        keys = [layer._keys for layer in cache.layers]
        values = [layer._values for layer in cache.layers]
        column = torch.tensor([length], device=mask.device)
        began = time.perf_counter()
        try:
            run = self.graphs or (self.step.step if compiled else self.step)
            logits = run(tokens, where, keys, values, column, attend)[:rows]
        except Exception:
            if not compiled:
                raise
            logger.exception("the compiled decode step failed; decoding with transformers' forward from now on")
            self.step = self.graphs = None
            return self.forward(feed, mask, positions, cache)
        for layer in cache.layers:
            layer.grow(length + 1)
        if not compiled and self.compiles and self.graphs is None:
            self._pays(next(b for b in self.buckets if b >= rows), time.perf_counter() - began)
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


def _records() -> Path:
    """``steps.json`` in inductor's cache directory: the compiles recorded go with the graphs they cached."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return Path(cache_dir()) / "ragscale-steps.json"


def recorded_compile_s(key: str) -> float:
    """What the last compile recorded under ``key`` took (``FIRST_COMPILE_S`` where none is)."""
    try:
        return float(json.loads(_records().read_text(encoding="utf-8"))[key])
    except (OSError, ValueError, KeyError, TypeError):
        return FIRST_COMPILE_S


def record_compile(key: str, seconds: float) -> None:
    """Record what a compile under ``key`` took; a record that cannot be written is skipped (it is an estimate)."""
    path = _records()
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        records = {}
    if not isinstance(records, dict):
        records = {}
    records[key] = round(seconds, 2)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # another process may write it too
        tmp.write_text(json.dumps(records, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        logger.warning("could not record the decode step's compile in %s: %s", path, exc)
