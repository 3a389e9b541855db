"""Prefill attention after cached keys on CPU: the cached part without a mask, the pass's own part causal.

The engine prefills a prompt after the keys/values of its longest cached prefix, and a long prompt that joins a
running batch in chunks, each chunk after the ones before (``batch.py``). Those passes have fewer queries than
keys, so transformers' ``sdpa`` attention gets an explicit causal mask: the kernel then computes every query
against every key of the pass, the half that the mask removes included, and the grouped key/value heads are first
copied once per query head (``repeat_kv``). At a few thousand tokens that attention is a third of the prefill.

Causal attention over ``past`` cached keys followed by the pass's own ``n`` is two attentions merged by their
log-sum-exp: the ``n`` queries against the ``past`` keys, which every query sees whole (no mask; the query heads
of one key/value head stacked as rows of one attention, so no copy), and against the pass's own keys, causal (the
kernel skips the masked half). The merge weights each part's output by its share of the softmax's denominator,
which is exact up to float rounding. The attention is registered with transformers as ``ragscale``
(:func:`use_split_attention`); every other call (a decode step, padded rows, a GPU) goes to ``sdpa`` unchanged.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

NAME = "ragscale"
_causal: list[weakref.ref] = []  # the last mask found to be causal after cached keys: every layer of a pass gets it


def causal_after(past: int, n: int, device: Any = None) -> torch.Tensor:
    """The causal mask of ``n`` queries after ``past`` keys: query ``i`` sees keys ``0 .. past + i``."""
    return torch.arange(n, device=device)[:, None] + past >= torch.arange(past + n, device=device)[None, :]


def split_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float | None) -> torch.Tensor:
    """Causal attention of ``query`` (1, heads, n, d) after the keys/values (1, kv heads, past + n, d) of the
    positions before it: the cached ``past`` unmasked and the ``n`` own causal, merged by log-sum-exp. Returns
    (1, heads, n, d)."""
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    _, heads, n, size = query.shape
    groups = key.shape[1]
    per_group, past = heads // groups, key.shape[2] - n
    stacked = query.reshape(1, groups, per_group * n, size)  # the query heads of one key/value head, as rows
    before, lse_before = flash(stacked, key[:, :, :past], value[:, :, :past], 0.0, False, scale=scale)
    own_keys = key[:, :, past:].repeat_interleave(per_group, dim=1)
    own_values = value[:, :, past:].repeat_interleave(per_group, dim=1)
    own, lse_own = flash(query, own_keys, own_values, 0.0, True, scale=scale)
    lse_before = lse_before.reshape(1, heads, n, 1)
    lse_own = lse_own.reshape(1, heads, n, 1)
    top = torch.maximum(lse_before, lse_own)
    w_before, w_own = torch.exp(lse_before - top), torch.exp(lse_own - top)
    return (before.reshape(1, heads, n, size) * w_before + own * w_own) / (w_before + w_own)


def _splits(query: torch.Tensor, key: torch.Tensor, mask: Any, dropout: float, kwargs: dict) -> bool:
    """Whether this call is one row's causal pass after cached keys, on CPU, with nothing else in its mask."""
    n, keys = query.shape[2], key.shape[2]
    if query.device.type != "cpu" or query.shape[0] != 1 or not 1 < n < keys or dropout:
        return False
    if any(kwargs.get(k) is not None for k in ("position_bias", "softcap", "sliding_window", "s_aux")):
        return False
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape != (1, 1, n, keys):
        return False
    if _causal and _causal[0]() is mask:  # checked at this pass's first layer
        return True
    if not torch.equal(mask[0, 0], causal_after(keys - n, n)):
        return False
    _causal[:] = [weakref.ref(mask)]
    return True


def ragscale_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention interface: :func:`split_attention` where it applies, else transformers' ``sdpa``."""
    if not _splits(query, key, attention_mask, dropout, kwargs):
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    return split_attention(query, key, value, scaling).transpose(1, 2).contiguous(), None


def use_split_attention(model: Any) -> bool:
    """Register the ``ragscale`` attention with transformers (its masks are ``sdpa``'s) and switch ``model`` to it
    where it runs ``sdpa``; whether it did."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    AttentionInterface.register(NAME, ragscale_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    model.set_attn_implementation(NAME)
    return True
