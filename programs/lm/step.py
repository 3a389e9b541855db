"""One decode step of a Llama-family model (Llama, Qwen2, SmolLM2), written over its weights for speed.

One concept in one file: the decode step, its fused weights and the engine's choice of how to run it.

transformers' forward pass for one token per row is about a thousand small operations, most of them Python: on a
CPU that costs milliseconds before any arithmetic, on a GPU it keeps the device waiting on the host. This module
runs the same arithmetic as a short straight-line function that ``torch.compile`` can take whole:

- the query, key and value projections run as one matrix product, and so do the MLP's gate and up projections
  (:class:`Fused` concatenates their weights once; the original layers become views of the fused
  weight, so memory does not grow and prefill, which still runs transformers' forward, reads the same numbers);
- rotary embeddings come from a table of every position's cos/sin, built once;
- keys and values are written in place into the engine's KV buffers (``kv.BufferLayer``) and attention reads the
  buffers' whole capacity, masked, with one ``scaled_dot_product_attention`` per layer, the query heads of a
  key/value head grouped as the rows of one attention (grouped-query attention without repeating keys).

The step reproduces transformers' forward for these models (a test checks the logits); a model of another
architecture, or one with features this step does not implement (sliding windows, rope scaling other than the
default), is refused by :func:`supports` and keeps transformers' forward.
"""

from __future__ import annotations

import inspect
import logging
import time
from typing import Any

import torch

logger = logging.getLogger(__name__)

ARCHITECTURES = ("llama", "qwen2")


def supports(model: Any) -> str | None:
    """Why :class:`DecodeStep` cannot run ``model`` (None where it can)."""
    config = model.config
    kind = getattr(config, "model_type", None)
    if kind not in ARCHITECTURES:
        return f"model type {kind!r} is not one of {', '.join(ARCHITECTURES)}"
    rope = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    if rope != "default":
        return f"rope type {rope!r} (only the default rotary embedding is implemented)"
    if getattr(config, "use_sliding_window", False):
        return "sliding-window attention"
    from ragscale.programs.lm.attention import NAME

    if getattr(config, "_attn_implementation", "sdpa") not in ("sdpa", "eager", NAME):
        return f"attention implementation {config._attn_implementation!r}"
    return None


class Fused(torch.nn.Module):
    """Linear layers that read the same input, run as one product over their concatenated weights.

    For ``Int8Linear`` layers the int8 weights, scales and biases are concatenated; for torch's ``nn.Linear`` the
    weights and biases. Each original layer is then pointed at its slice of the fused tensors (a view), so the
    layers keep working for prefill and the weights are held once. One layer is held as it is (no copy). The
    tensors are buffers, so ``torch.compile``'s freezing takes them as constants.
    """

    def __init__(self, layers: list[torch.nn.Module]) -> None:
        from ragscale.programs.lm.layouts import Int8Linear

        super().__init__()
        self.kind = "int8" if isinstance(layers[0], Int8Linear) else "dense"
        names = ("qweight", "scale") if self.kind == "int8" else ("weight",)
        sizes = [layer.out_features for layer in layers]
        for name in names:
            parts = [getattr(layer, name).detach() for layer in layers]
            self.register_buffer(name, parts[0] if len(parts) == 1 else torch.cat(parts), persistent=False)
        biases = [layer.bias for layer in layers]
        bias = None
        if any(b is not None for b in biases):
            like = next(b for b in biases if b is not None)
            parts = [b.detach() if b is not None else like.new_zeros(n) for b, n in zip(biases, sizes, strict=True)]
            bias = parts[0] if len(parts) == 1 else torch.cat(parts)
        self.register_buffer("bias", bias, persistent=False)
        if len(layers) == 1:
            return
        start = 0
        for layer, n in zip(layers, sizes, strict=True):
            for name in names:
                part = getattr(self, name)[start : start + n]
                setattr(layer, name, torch.nn.Parameter(part, requires_grad=False) if name == "weight" else part)
            if layer.bias is not None:
                part = self.bias[start : start + n]
                layer.bias = torch.nn.Parameter(part, requires_grad=False) if self.kind == "dense" else part
            start += n

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "int8":
            y = torch._weight_int8pack_mm(x.to(torch.bfloat16), self.qweight, self.scale).to(x.dtype)
        else:
            y = torch.nn.functional.linear(x, self.weight)
        return y if self.bias is None else y + self.bias


def can_fuse(layers: list[torch.nn.Module]) -> bool:
    """Whether ``layers`` are all int8 layers or all torch ``nn.Linear`` (oneDNN's packed weights are opaque)."""
    from ragscale.programs.lm.layouts import Int8Linear

    kinds = {type(layer) for layer in layers}
    return kinds == {Int8Linear} or kinds == {torch.nn.Linear}


def projection(layers: list[torch.nn.Module]) -> torch.nn.Module:
    """``layers`` as one module whose output is theirs concatenated: :class:`Fused` where their layout allows."""
    return Fused(layers) if can_fuse(layers) else _Concat(layers)


class _Concat(torch.nn.Module):
    def __init__(self, layers: list[torch.nn.Module]) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([layer(x) for layer in self.layers], dim=-1) if len(self.layers) > 1 else self.layers[0](x)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' ``LlamaRMSNorm``/``Qwen2RMSNorm``: the statistics in float32, the product in ``x``'s dtype."""
    x32 = x.float()
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class _Layer(torch.nn.Module):
    def __init__(self, layer: Any) -> None:
        super().__init__()
        attn, mlp = layer.self_attn, layer.mlp
        self.register_buffer("norm1", layer.input_layernorm.weight.detach(), persistent=False)
        self.register_buffer("norm2", layer.post_attention_layernorm.weight.detach(), persistent=False)
        self.qkv = projection([attn.q_proj, attn.k_proj, attn.v_proj])
        self.o = projection([attn.o_proj])
        self.gate_up = projection([mlp.gate_proj, mlp.up_proj])
        self.down = projection([mlp.down_proj])


class DecodeStep(torch.nn.Module):
    """One token per row through ``model``, reading and writing the engine's KV buffers; see the module docstring.

    ``forward(tokens, positions, keys, values, column, mask)``: ``tokens`` and ``positions`` are ``(rows,)``
    tensors; ``keys``/``values`` the engine's KV buffers, one per layer, ``(buffer rows, kv heads, capacity, head
    size)``, whose first ``rows`` rows are the batch's; ``column`` (a one-element tensor) is where the step writes
    this token's keys and values; ``mask`` is ``(rows, capacity)``, true where a row attends. Attention reads the
    whole capacity, masked: its shapes then do not change from one step to the next. Returns the logits
    ``(rows, vocabulary)`` in float32.

    ``compile=True`` runs it through ``torch.compile`` with freezing: the weights become constants. On a CPU
    with max-autotune, so inductor can pick its own matrix-product kernels for them (its C++ template for int8
    weights), one compiled graph per row count serving every buffer size (marked dynamic); on a GPU with
    inductor's default kernels (:class:`Decoder` replays it as CUDA graphs; inductor's own, ``reduce-overhead``,
    are skipped for a step that writes into its inputs, the KV buffers).
    """

    def __init__(self, model: Any, *, compile: bool = False) -> None:
        super().__init__()
        why = supports(model)
        if why:
            raise ValueError(f"the static decode step cannot run this model: {why}")
        config = model.config
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.eps = config.rms_norm_eps
        self.scale = self.head_dim**-0.5
        self.register_buffer("embed", model.model.embed_tokens.weight.detach(), persistent=False)
        self.layers = torch.nn.ModuleList(_Layer(layer) for layer in model.model.layers)
        self.register_buffer("norm", model.model.norm.weight.detach(), persistent=False)
        self.head = projection([model.lm_head])
        rotary = model.model.rotary_emb
        positions = torch.arange(config.max_position_embeddings, device=model.device, dtype=torch.float32)
        freqs = positions[:, None] * rotary.inv_freq.to(model.device, torch.float32)[None]
        table = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", (table.cos() * rotary.attention_scaling).to(model.dtype), persistent=False)
        self.register_buffer("sin", (table.sin() * rotary.attention_scaling).to(model.dtype), persistent=False)
        # each step's graphs (one per bucket) are its own, its weights being their constants: isolated, so that
        # the engines of one process do not share the forward function's limit of graphs
        isolated: dict[str, Any] = {"dynamic": False}
        if "isolate_recompiles" in inspect.signature(torch.compile).parameters:  # torch < 2.13 shares one limit
            isolated.update(isolate_recompiles=True, recompile_limit=2 * len(BUCKETS))
        self.compiled = None
        if compile and model.device.type == "cuda":
            self.compiled = torch.compile(self, **isolated)
        elif compile:
            self.compiled = torch.compile(self, options={"max_autotune": True}, **isolated)

    def weight_bytes(self) -> int:
        """The bytes of the tensors the step reads (each storage once): what one compiled graph copies."""
        seen, total = set(), 0
        for tensor in (*self.parameters(), *self.buffers()):
            if tensor.untyped_storage().data_ptr() not in seen:
                seen.add(tensor.untyped_storage().data_ptr())
                total += tensor.untyped_storage().nbytes()
        return total

    def step(self, tokens: Any, positions: Any, keys: list, values: list, column: Any, mask: Any) -> torch.Tensor:
        """The logits of one step (compiled where asked); buffer rows and capacity are marked dynamic."""
        if self.compiled is None:
            return self(tokens, positions, keys, values, column, mask)
        from torch._inductor import config

        if not hasattr(keys[0], "_dynamo_dynamic_indices"):  # a batch's buffers are marked at its first step
            for tensor in (*keys, *values):
                torch._dynamo.mark_dynamic(tensor, 0)
                torch._dynamo.mark_dynamic(tensor, 2)
        torch._dynamo.mark_dynamic(mask, 1)
        # read when a graph compiles (the compile's own options do not reach freezing); quiet autotuning
        quiet = {"autotune_num_choices_displayed": 0, "max_autotune_report_choices_stats": False}
        with config.patch(freezing=True, **quiet):
            return self.compiled(tokens, positions, keys, values, column, mask)

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        keys: list,
        values: list,
        column: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        rows = tokens.shape[0]
        h, hk, d = self.heads, self.kv_heads, self.head_dim
        group = h // hk
        x = torch.nn.functional.embedding(tokens, self.embed)  # (rows, hidden)
        cos, sin = self.cos[positions][:, None, :], self.sin[positions][:, None, :]  # (rows, 1, d)
        attend = mask[:, None, None, :]  # (rows, 1, 1, capacity): one key mask for every query of a row
        for layer, k_buffer, v_buffer in zip(self.layers, keys, values, strict=True):
            y = layer.qkv(_rms_norm(x, layer.norm1, self.eps))
            q, k, v = y.split((h * d, hk * d, hk * d), dim=-1)
            q = _rotate(q.view(rows, h, d), cos, sin)
            k_all, v_all = k_buffer[:rows], v_buffer[:rows]
            k_all.index_copy_(2, column, _rotate(k.view(rows, hk, d), cos, sin)[:, :, None])
            v_all.index_copy_(2, column, v.view(rows, hk, 1, d))
            # the queries of one key/value head as the rows of one attention: (rows, kv heads, group, d)
            out = torch.nn.functional.scaled_dot_product_attention(
                q.view(rows, hk, group, d), k_all, v_all, attn_mask=attend, scale=self.scale
            )
            x = x + layer.o(out.reshape(rows, h * d))
            gate, up = layer.gate_up(_rms_norm(x, layer.norm2, self.eps)).chunk(2, dim=-1)
            x = x + layer.down(torch.nn.functional.silu(gate) * up)
        return self.head(_rms_norm(x, self.norm, self.eps)).float()


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
BUCKETS = (1, 2, 4, 8, 16)
"""Row counts the step is compiled for: a batch of 3 rows runs as 4 (the extra row computes nothing anyone reads),
so a compiled step serves every batch size with a few graphs."""


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
    from ragscale.programs.lm.layouts import DECODE_ROWS

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
            from ragscale.programs.lm.graphs import StepGraphs

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
