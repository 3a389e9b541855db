"""What a program runs on: the LM and its adapter, the questions and the corpus.

Each call is a thin one into the layers below (``programs.lm``, ``data``), with the defaults a user would otherwise
have to know: the adapter a small local model needs, the shared data folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragscale import data

if TYPE_CHECKING:
    import dspy

    from ragscale.data.corpora import Corpus


def configure(lm: str | Path | dspy.BaseLM | None = None, *, adapter: str | dspy.Adapter | None = None,
              **lm_options: Any) -> dspy.BaseLM:  # fmt: skip
    """Set the LM and adapter every ragscale and DSPy call uses from now on (``dspy.configure``); returns the LM.

    ``lm`` is a name ``load_lm`` takes (a preset such as ``"qwen2.5-coder-0.5b"``, the default, a model folder, a
    ``.gguf`` file, or ``"openai/<model>"`` with ``api_base=``) or any ``dspy.LM``. ``adapter`` is a name of
    ``ragscale.programs.lm.ADAPTERS`` (``field``, ``field-prefill``, ``chat``, ``json``) or a ``dspy.Adapter``; by
    default ragscale's ``FieldAdapter`` (one output field a call, choices constrained: what small local models
    parse), for any LM. ``lm_options`` go to ``load_lm``.
    """
    import dspy

    from ragscale.programs.lm import DEFAULT_LM, load_lm, make_adapter

    if lm is None or isinstance(lm, str | Path):
        lm = load_lm(str(lm or DEFAULT_LM), **lm_options)
    elif lm_options:
        raise TypeError(f"options {sorted(lm_options)} are load_lm's: give a model name with them, not a loaded LM")
    if adapter is None or isinstance(adapter, str):
        adapter = make_adapter(adapter or "field")
    dspy.configure(lm=lm, adapter=adapter)
    return lm


def load_corpus(name: str | Path, data_dir: str | Path | None = None) -> Corpus:
    """A corpus to search (``data.corpora``): a dataset's every paragraph (``"hotpotqa"``, ...), ``"all"`` of them,
    or a JSONL file (FlashRAG's ``{id, contents}`` or ``{id, title, text}``); ``data_dir`` defaults to the shared
    datasets folder (``RAGSCALE_DATA_DIR``)."""
    return data.load_corpus(str(name), Path(data_dir) if data_dir is not None else data.default_data_dir())


def load_split(dataset: str, split: str = "dev", data_dir: str | Path | None = None) -> list[dspy.Example]:
    """A dataset's questions as ``dspy.Example`` objects (``question``, ``answers``, ``paragraphs``, ...): ``dataset``
    one of ``ragscale.data.DATASETS`` and ``split`` ``"train"`` or ``"dev"``."""
    return data.load_split(dataset, split, Path(data_dir) if data_dir is not None else None)
