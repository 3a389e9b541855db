"""Load a GGUF file into a transformers model one tensor at a time.

transformers' ``from_pretrained(..., gguf_file=...)`` dequantises every tensor of the file into a float32 state
dict and only then fills the model from it, so while it loads the weights are resident twice. :func:`load_gguf`
builds the model from the file's config with its weights left uninitialised, then reads each tensor of the file
and dequantises it (gguf's ``dequantize``) straight into its parameter: the peak is the model plus one tensor. The
names, the architecture's reordering of tensors (llama-type files store q and k permuted) and the config come from
transformers' own GGUF code, so the model equals the one ``from_pretrained`` loads (a test compares them tensor by
tensor). The tensor table comes from ``gguf_header.read_header``, which skips the vocabulary that
``gguf.GGUFReader`` would parse element by element.
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf import GGMLQuantizationType, dequantize
from gguf.quants import quant_shape_to_byte_shape

from ragscale.process import trim_heap
from ragscale.programs.lm.gguf_header import GGUFTensor, read_header

_NAME_MAP_LOCK = threading.Lock()


def config_from_fields(config_fields: dict[str, Any]) -> Any:
    """The transformers config that ``config_fields`` (a GGUF file's config as transformers reads it) describe: the
    config :func:`load_gguf` builds its model from."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return CONFIG_MAPPING[config_fields["model_type"]].from_dict(config_fields)


def load_gguf(path: Path, dtype: Any, config_fields: dict[str, Any] | None = None) -> Any:
    """The causal LM stored in the GGUF file ``path``, on CPU in ``dtype``, in eval mode. ``config_fields`` are the
    config as transformers reads it from the file (``gguf_metadata.gguf_metadata``); None reads them now.

    A parameter the file does not fill (other than one tied to a filled one) or a tensor of the wrong shape is an
    error naming it and the file, never a model with random weights.
    """
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.initialization import no_init_weights
    from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, TensorProcessor, load_gguf_checkpoint

    if config_fields is None:
        config_fields = load_gguf_checkpoint(str(path))["config"]  # the config as AutoConfig reads it from the file
    config = config_from_fields(config_fields)
    config._name_or_path = str(path.parent)
    with no_init_weights():
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    header = read_header(path)
    processor = TENSOR_PROCESSORS.get(header.architecture, TensorProcessor)(config=config_fields)
    hf_names = weights_map(model, processor)
    targets = dict(model.named_parameters()) | dict(model.named_buffers())
    filled: set[int] = set()
    # Each tensor's bytes are read from the file, not through a memory map: mapped pages stay resident (and
    # counted) until the map closes, read ones are freed with the tensor.
    with path.open("rb") as file, torch.no_grad():
        for tensor in header.tensors:
            raw = read_tensor(file, tensor)
            result = processor.process(
                weights=dequantize(raw, tensor.kind),
                name=tensor.name,
                tensor_key_mapping=hf_names,
                parsed_parameters={"config": config_fields},
            )
            if result.name not in hf_names:
                continue
            name = hf_names[result.name]
            target = targets[name]
            source = torch.from_numpy(np.require(result.weights, requirements=["C", "W"]))
            if tuple(source.shape) != tuple(target.shape):
                raise ValueError(
                    f"{path}: tensor {tensor.name!r} has shape {tuple(source.shape)}, but {name} of the model built "
                    f"from the file's config has {tuple(target.shape)}"
                )
            target.copy_(source)
            filled.add(target.data_ptr())
            del raw, result, source
            trim_heap()  # the dequantised temporaries are freed into the heap in holes it would otherwise keep
    del targets
    model.tie_weights()
    missing = [name for name, p in model.named_parameters(remove_duplicate=False) if p.data_ptr() not in filled]
    if missing:
        raise ValueError(f"{path}: the file holds no tensor for {missing[:5]} ({len(missing)} parameters in all)")
    return model.eval()


def read_tensor(file: Any, tensor: GGUFTensor) -> Any:
    """The data of ``tensor`` read from the open GGUF ``file`` as numpy holds it for ``gguf.dequantize``: plain
    types as their values in the tensor's shape (outermost dimension first), quantised ones as the bytes of each
    row's blocks."""
    kind = tensor.kind
    plain = {
        GGMLQuantizationType.F16: np.float16, GGMLQuantizationType.F32: np.float32,
        GGMLQuantizationType.F64: np.float64, GGMLQuantizationType.I8: np.int8, GGMLQuantizationType.I16: np.int16,
        GGMLQuantizationType.I32: np.int32, GGMLQuantizationType.I64: np.int64,
    }  # fmt: skip
    shape = tuple(reversed(tensor.dims))
    file.seek(tensor.start)
    data = file.read(tensor.nbytes)
    if kind in plain:
        return np.frombuffer(data, dtype=plain[kind]).reshape(shape)
    return np.frombuffer(data, dtype=np.uint8).reshape(quant_shape_to_byte_shape(shape, kind))


def weights_map(model: Any, processor: Any) -> dict[str, str]:
    """GGUF tensor name -> the model's parameter name: transformers' ``get_gguf_hf_weights_map``, with gguf's name
    map built once per load. That function visits every submodule (hundreds in a 24-layer model) and builds the
    architecture's name map anew at each, which takes seconds; the map depends only on the architecture and the
    layer count."""
    from transformers.modeling_gguf_pytorch_utils import get_gguf_hf_weights_map

    with _NAME_MAP_LOCK:
        build = gguf.get_tensor_name_map
        gguf.get_tensor_name_map = functools.cache(build)
        try:
            return get_gguf_hf_weights_map(model, processor)
        finally:
            gguf.get_tensor_name_map = build
