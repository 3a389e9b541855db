"""Load a GGUF file into a transformers model one tensor at a time.

transformers' ``from_pretrained(..., gguf_file=...)`` dequantises every tensor of the file into a float32 state
dict and only then fills the model from it, so while it loads the weights are resident twice. :func:`load_gguf`
builds the model from the file's config with its weights left uninitialised, then dequantises each tensor of the
memory-mapped file (gguf's ``dequantize``) straight into its parameter: the peak is the model plus one tensor. The
names, the architecture's reordering of tensors (llama-type files store q and k permuted) and the config come from
transformers' own GGUF code, so the model equals the one ``from_pretrained`` loads (a test compares them tensor by
tensor).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load_gguf(path: Path, dtype: Any) -> Any:
    """The causal LM stored in the GGUF file ``path``, on CPU in ``dtype``, in eval mode.

    A parameter the file does not fill (other than one tied to a filled one) or a tensor of the wrong shape is an
    error naming it and the file, never a model with random weights.
    """
    import numpy as np
    import torch
    from gguf import GGUFReader, dequantize
    from transformers import AutoModelForCausalLM
    from transformers.initialization import no_init_weights
    from transformers.modeling_gguf_pytorch_utils import (
        TENSOR_PROCESSORS,
        TensorProcessor,
        get_gguf_hf_weights_map,
        load_gguf_checkpoint,
        read_field,
    )
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    # Reading a file's metadata (its whole vocabulary) takes seconds: it is read twice, once for the config as
    # AutoConfig reads it and once with the tensors, as from_pretrained does.
    config_fields = load_gguf_checkpoint(str(path))["config"]
    config = CONFIG_MAPPING[config_fields["model_type"]].from_dict(config_fields)
    config._name_or_path = str(path.parent)
    with no_init_weights():
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    reader = GGUFReader(path)
    architecture = read_field(reader, "general.architecture")[0]
    reader.fields.clear()  # the vocabulary's many small arrays: the tensors are all that is read from here on
    processor = TENSOR_PROCESSORS.get(architecture, TensorProcessor)(config=config_fields)
    hf_names = get_gguf_hf_weights_map(model, processor)
    targets = dict(model.named_parameters()) | dict(model.named_buffers())
    filled: set[int] = set()
    # Each tensor's bytes are read from the file, not through the reader's memory map: mapped pages stay resident
    # (and counted) until the map closes, read ones are freed with the tensor.
    with path.open("rb") as file, torch.no_grad():
        for tensor in reader.tensors:
            file.seek(tensor.data_offset)
            raw = np.frombuffer(file.read(tensor.n_bytes), dtype=tensor.data.dtype).reshape(tensor.data.shape)
            result = processor.process(
                weights=dequantize(raw, tensor.tensor_type),
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
    del reader, targets
    model.tie_weights()
    missing = [name for name, p in model.named_parameters(remove_duplicate=False) if p.data_ptr() not in filled]
    if missing:
        raise ValueError(f"{path}: the file holds no tensor for {missing[:5]} ({len(missing)} parameters in all)")
    return model.eval()
