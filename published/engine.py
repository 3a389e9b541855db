"""The engine's table against llama.cpp, made from the JSON ``benchmarks/engine_table.py`` writes.

Each row is one model in one weight layout at one prompt length, measured in a process of its own: prefill tokens
per second, one-row decode tokens per second after the prompt, and the process's peak resident memory beside its
bound (twice the weights as loaded plus the KV cache's bytes at that length); with llama.cpp's figures on the same
GGUF file where the run had them. ``engine FILE table`` writes the table, ``engine FILE made`` the machine and date.
"""

from __future__ import annotations

import json
from pathlib import Path


def bound_gb(row: dict) -> float:
    """The memory bound of ``docs/engine.md``: twice the weights as loaded plus the KV cache's bytes."""
    return 2 * row["weights_gb"] + row["kv_gb"]


def table(rows: list[dict]) -> str:
    """The rows as a Markdown table, each ratio ours over llama.cpp's."""
    lines = [
        "| model | weights | prompt tokens | pass tokens | prefill tok/s (vs llama.cpp) "
        "| decode tok/s after it (vs llama.cpp) | peak RSS GB (bound) | llama.cpp peak RSS GB |",
        "|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    for row in rows:
        llama = row.get("llama_cpp") or {}

        def versus(key: str, row: dict = row, llama: dict = llama) -> str:
            ours = row[key]
            return f"{ours:,.1f} ({ours / llama[key]:.2f}x)" if llama else f"{ours:,.1f}"

        lines.append(
            f"| {row['model']} | {row['weights']} | {row['tokens']:,} | {row['chunk_tokens']:,} "
            f"| {versus('prefill_tok_s')} | {versus('decode_tok_s')} | {row['peak_rss_gb']:.2f} ({bound_gb(row):.2f}) "
            f"| {llama.get('peak_rss_gb', '')} |"
        )
    return "\n".join(lines)


def directive(path: Path, part: str) -> str:
    """``table`` or ``made`` of the engine table kept in ``path``."""
    result = json.loads(path.read_text(encoding="utf-8"))
    if part == "table":
        return table(result["rows"])
    if part == "made":
        return f"{result['date']} on {result['cpu']} with {' '.join(result['flags'])}"
    raise ValueError(f"engine {path.name}: unknown part {part!r}; valid: made, table")
