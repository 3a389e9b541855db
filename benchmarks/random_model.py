"""A model directory with a packaged model's shapes and tokenizer and random weights, for speed checks on a machine
the weights cannot reach (a lent GPU takes a few MiB, not the model).

    python benchmarks/random_model.py export qwen2.5-coder-0.5b DIR   # here: config.json, tokenizer (about 11 MiB)
    python benchmarks/random_model.py build DIR                       # there: adds random bfloat16 weights

``export`` reads the config and tokenizer from the preset's GGUF file (the conversion ``load_model`` caches);
``build`` fills DIR with a model of that config, seeded, so any engine that loads a model directory
(``load_model(DIR)``, ``benchmarks/lm_throughput.py --model DIR``) runs it. Its answers are noise: time it, never
score it.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def export(preset: str, out: Path) -> None:
    from ragscale.programs.lm.gguf_loader import config_from_fields
    from ragscale.programs.lm.gguf_metadata import gguf_metadata
    from ragscale.programs.lm.models import cache_dir, resolve

    path = resolve(preset)
    if not path.is_file() or path.suffix != ".gguf":
        raise SystemExit(f"{preset!r} is not a GGUF preset or file (resolved to {path})")
    tokenizer, fields = gguf_metadata(path, cache_dir())
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(out))
    config_from_fields(fields).save_pretrained(str(out))
    print(f"{out}: config and tokenizer of {preset}")


def build(out: Path, seed: int = 0) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if not (out / "config.json").is_file():
        raise SystemExit(f"{out} has no config.json: run 'export' first")
    config = AutoConfig.from_pretrained(str(out))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(str(out))
    print(f"{out}: {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M random parameters")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    ex = verbs.add_parser("export", help="write a preset's config and tokenizer to DIR")
    ex.add_argument("preset")
    ex.add_argument("dir", type=Path)
    bu = verbs.add_parser("build", help="add random weights to an exported DIR")
    bu.add_argument("dir", type=Path)
    bu.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.verb == "export":
        export(args.preset, args.dir)
    else:
        build(args.dir, args.seed)


if __name__ == "__main__":
    main()
