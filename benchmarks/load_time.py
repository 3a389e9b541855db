"""How long does loading a packaged model take, with its tokenizer and config converted anew and read back?

    python benchmarks/load_time.py [--lm qwen2.5-coder-0.5b] [--json FILE]

Loads the model twice in this process with ``load_model`` (the path ``load_lm`` takes) into a new, empty model
cache (``RAGSCALE_CACHE`` in a temporary folder, the assembled GGUF file linked into it, not copied): the first
load converts the GGUF file's tokenizer and config (``gguf_metadata``) and keeps them, the second reads them back.
Prints the seconds of each whole load and of the metadata step alone (converted, read back), and writes them as
JSON.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from ragscale.experiments.files import write_json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lm", default="qwen2.5-coder-0.5b", help="a preset")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    from ragscale.process import prepare_process

    prepare_process()
    from ragscale.programs.lm import gguf_metadata, models

    source = models.resolve(args.lm)
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        os.environ["RAGSCALE_CACHE"] = cache  # empty: nothing converted yet
        path = Path(cache) / source.name
        path.symlink_to(source)
        for load in ("converted", "read back"):
            start = time.perf_counter()
            models.load_model(str(path))
            load_s = time.perf_counter() - start
            start = time.perf_counter()
            if load == "converted":
                shutil.rmtree(gguf_metadata.converted_dir(path, Path(cache)))  # convert again, alone, to time the step
            gguf_metadata.gguf_metadata(path, Path(cache))
            rows.append({"load": load, "metadata_s": round(time.perf_counter() - start, 2), "load_s": round(load_s, 2)})
    print(f"\n{args.lm}\n\n| tokenizer and config | metadata s | whole load s |\n|---|--:|--:|")
    for row in rows:
        print(f"| {row['load']} | {row['metadata_s']:.2f} | {row['load_s']:.2f} |")
    if args.json:
        write_json(args.json, {"lm": args.lm, "loads": rows}, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
