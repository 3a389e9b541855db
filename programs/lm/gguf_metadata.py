"""A GGUF file's tokenizer and config, converted by transformers once and kept as JSON.

transformers builds the tokenizer and the config of a GGUF file from its metadata, which ``gguf.GGUFReader`` parses
element by element, the whole vocabulary included, and the tokenizer and the config each parse it again: seconds
per load for SmolLM2's 49k-token vocabulary, more for Qwen's 151k, in every process that loads the model.
:func:`gguf_metadata` converts them once and keeps what transformers made -- the tokenizer as ``save_pretrained``
writes it (``tokenizer.json`` and its configs) and the config fields as ``config_fields.json`` -- in a folder
under ``<model cache>/converted`` named for the file (its path, size and modification time) and the transformers
version; later loads read that folder. Only JSON (and the chat template's text) is read back: nothing in the
folder runs code. A folder is written whole under a temporary name and renamed into place, so a load never sees a
half-written one, and two processes converting at once both end with a complete folder.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

CONFIG_FIELDS = "config_fields.json"


def converted_dir(path: Path, cache: Path) -> Path:
    """The folder under the model cache ``cache`` that holds (or will hold) the converted metadata of the GGUF file
    ``path``."""
    import transformers

    stat = path.stat()
    where = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    key = f"{path.stem}-{where}-{stat.st_size}-{stat.st_mtime_ns}-transformers{transformers.__version__}"
    return cache / "converted" / key


def gguf_metadata(path: Path, cache: Path) -> tuple[Any, dict[str, Any]]:
    """(tokenizer, config fields) of the GGUF file ``path``, as transformers converts them from its metadata, kept
    under the model cache ``cache`` (``models.cache_dir()``): the config fields are what ``load_gguf_checkpoint``
    reads (``gguf_loader.load_gguf`` builds the model from them)."""
    from transformers import AutoTokenizer

    folder = converted_dir(path, cache)
    if (folder / CONFIG_FIELDS).is_file():
        fields = json.loads((folder / CONFIG_FIELDS).read_text(encoding="utf-8"))
        return AutoTokenizer.from_pretrained(str(folder)), fields
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    logger.info("converting the tokenizer and config of %s (once; kept in %s)", path, folder)
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    fields = load_gguf_checkpoint(str(path))["config"]
    scratch = None
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
        tokenizer.save_pretrained(str(scratch))
        (scratch / CONFIG_FIELDS).write_text(json.dumps(fields), encoding="utf-8")
        os.rename(scratch, folder)
    except OSError as error:
        if not (folder / CONFIG_FIELDS).is_file():  # else another process put its folder there first
            # a cache that cannot be written costs the conversion on every load, nothing else
            logger.warning("could not keep the converted tokenizer and config of %s in %s: %s", path, folder, error)
    finally:
        if scratch is not None and scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)
    return tokenizer, fields
