"""A model directory with a packaged model's shapes and tokenizer and random weights, for speed checks on a machine
the weights cannot reach (a lent GPU takes a few MiB, not the model).

    python benchmarks/random_model.py export qwen2.5-coder-0.5b DIR   # here: config.json, tokenizer (about 11 MiB)
    python benchmarks/random_model.py build DIR                       # there: adds random bfloat16 weights
    python benchmarks/random_model.py export qwen2.5-coder-0.5b DIR --shape 7b   # Qwen2.5-7B's shapes

``export`` reads the config and tokenizer from the preset's GGUF file (the conversion ``load_model`` caches);
``build`` fills DIR with a model of that config, seeded, so any engine that loads a model directory
(``load_model(DIR)``, ``benchmarks/lm_throughput.py --model DIR``) runs it. Its answers are noise: time it, never
score it. ``--shape 7b`` gives the config Qwen2.5-7B's sizes (the tokenizer stays the preset's): a model that big
cannot travel at all, and its speed is what a GPU user runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

SHAPES = {
    "7b": {
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
    }
}
"""Other models' sizes an exported config can take (Qwen2.5-7B's, from its published config)."""


def export(preset: str, out: Path, shape: str | None = None) -> None:
    from ragscale.programs.lm.gguf_loader import config_from_fields
    from ragscale.programs.lm.gguf_metadata import gguf_metadata
    from ragscale.programs.lm.models import cache_dir, resolve

    path = resolve(preset)
    if not path.is_file() or path.suffix != ".gguf":
        raise SystemExit(f"{preset!r} is not a GGUF preset or file (resolved to {path})")
    tokenizer, fields = gguf_metadata(path, cache_dir())
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(out))
    config = config_from_fields(fields)
    for key, value in SHAPES.get(shape, {}).items():
        setattr(config, key, value)
    if shape and getattr(config, "layer_types", None):
        config.layer_types = [config.layer_types[0]] * config.num_hidden_layers
    config.save_pretrained(str(out))
    print(f"{out}: config and tokenizer of {preset}" + (f", {shape} shapes" if shape else ""))


def build(out: Path, seed: int = 0, device: str = "cpu") -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if not (out / "config.json").is_file():
        raise SystemExit(f"{out} has no config.json: run 'export' first")
    config = AutoConfig.from_pretrained(str(out))
    torch.manual_seed(seed)
    with torch.device(device):  # a 7B model's random weights fill in seconds on a GPU, minutes on a CPU
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(str(out))
    print(f"{out}: {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M random parameters")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    ex = verbs.add_parser("export", help="write a preset's config and tokenizer to DIR")
    ex.add_argument("preset")
    ex.add_argument("dir", type=Path)
    ex.add_argument("--shape", choices=sorted(SHAPES), help="another model's sizes for the config")
    bu = verbs.add_parser("build", help="add random weights to an exported DIR")
    bu.add_argument("dir", type=Path)
    bu.add_argument("--seed", type=int, default=0)
    bu.add_argument("--device", default="cpu", help="where the random weights are drawn (cpu or cuda)")
    args = parser.parse_args(argv)
    if args.verb == "export":
        export(args.preset, args.dir, args.shape)
    else:
        build(args.dir, args.seed, args.device)


if __name__ == "__main__":
    main()
