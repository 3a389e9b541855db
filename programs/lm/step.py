"""One decode step of a Llama-family model (Llama, Qwen2, SmolLM2), written over its weights for speed.

One concept in one file: the decode step and its fused weights. The engine's choice of how to run it (this step
eager or compiled, replayed as CUDA graphs, or transformers' forward) is ``decoder.py``'s.

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
from typing import Any

import torch

from ragscale.programs.lm.attention import NAME
from ragscale.programs.lm.layouts import Int4Linear, Int8Linear

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
    if getattr(config, "_attn_implementation", "sdpa") not in ("sdpa", "eager", NAME):
        return f"attention implementation {config._attn_implementation!r}"
    return None


class Fused(torch.nn.Module):
    """Linear layers that read the same input, run as one product over their concatenated weights.

    For ``Int8Linear`` and ``Int4Linear`` layers the quantised weights, scales and biases are concatenated; for
    torch's ``nn.Linear`` the weights and biases. Each original layer is then pointed at its slice of the fused
    tensors (a view), so the layers keep working for prefill and the weights are held once; only int4 scales and
    zero points (an eighth of the int4 bytes) are held twice, their slices not being contiguous. One layer is
    held as it is (no copy).
    """

    def __init__(self, layers: list[torch.nn.Module]) -> None:
        super().__init__()
        self.kind = {Int4Linear: "int4", Int8Linear: "int8"}.get(type(layers[0]), "dense")
        self.quantised = type(layers[0])  # whose ``product`` a quantised kind runs
        names = {"int4": ("qweight", "scales_zeros"), "int8": ("qweight", "scale")}.get(self.kind, ("weight",))
        sizes = [layer.out_features for layer in layers]
        for name in names:
            parts = [getattr(layer, name).detach() for layer in layers]
            along = 1 if name == "scales_zeros" else 0  # (groups, outputs, 2)
            self.register_buffer(name, parts[0] if len(parts) == 1 else torch.cat(parts, along), persistent=False)
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
                if name == "scales_zeros":  # a slice across outputs is not contiguous: each layer keeps its own
                    continue
                part = getattr(self, name)[start : start + n]
                setattr(layer, name, torch.nn.Parameter(part, requires_grad=False) if name == "weight" else part)
            if layer.bias is not None:
                part = self.bias[start : start + n]
                layer.bias = torch.nn.Parameter(part, requires_grad=False) if self.kind == "dense" else part
            start += n

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind != "dense":  # the layers' own kernel, on the fused tensors of the same names
            y = self.quantised.product(self, x.to(torch.bfloat16)).to(x.dtype)
        else:
            y = torch.nn.functional.linear(x, self.weight)
        return y if self.bias is None else y + self.bias


def can_fuse(layers: list[torch.nn.Module]) -> bool:
    """Whether ``layers`` are all int8 layers, all int4 layers or all torch ``nn.Linear`` (oneDNN's packed weights
    are opaque)."""
    kinds = {type(layer) for layer in layers}
    return len(kinds) == 1 and kinds <= {Int8Linear, Int4Linear, torch.nn.Linear}


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

    ``compile=True`` runs it through ``torch.compile``, the weights as the graph's inputs (no freezing: a frozen
    graph holds its own packed copy of every weight, one per row count, where this one reads the model's). On a CPU
    with max-autotune, so inductor picks its own matrix-product kernels (its C++ template for int8 weights), one
    graph per row count serving every buffer size (marked dynamic); on a GPU with inductor's default kernels
    (``decoder.Decoder`` replays it as CUDA graphs; inductor's own, ``reduce-overhead``, are skipped for a step
    that writes into its inputs, the KV buffers). Inductor keeps what it compiled in its cache on disk, so another
    process compiling the same step for the same row count and torch reads it back instead.
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
        # each step's graphs (one per bucket) are its own: isolated, so that the engines of one process do not
        # share the forward function's limit of graphs
        isolated: dict[str, Any] = {"dynamic": False}
        if "isolate_recompiles" in inspect.signature(torch.compile).parameters:  # torch < 2.13 shares one limit
            isolated.update(isolate_recompiles=True, recompile_limit=2 * len(BUCKETS))
        self.compiled = None
        if compile and model.device.type == "cuda":
            self.compiled = torch.compile(self, **isolated)
        elif compile:
            self.compiled = torch.compile(self, options={"max_autotune": True}, **isolated)

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
        quiet = {"autotune_num_choices_displayed": 0, "max_autotune_report_choices_stats": False}
        with config.patch(**quiet):  # read when a graph compiles
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


BUCKETS = (1, 2, 4, 8, 16)
"""Row counts the step is compiled for: a batch of 3 rows runs as 4 (the extra row computes nothing anyone reads),
so a compiled step serves every batch size with a few graphs."""
