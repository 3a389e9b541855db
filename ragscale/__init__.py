"""ragscale: Retrieval-Augmented Generation methods as DSPy programs, compiled against EM/F1 and run on local models.

One import is the whole API; nothing heavy loads until a name is used (``import ragscale`` imports no torch)::

    import ragscale
    ragscale.configure(lm="qwen2.5-coder-0.5b")          # the LM and the adapter it needs, for every call below
    drag = ragscale.DRAG(ragscale.retriever("hotpotqa"), k=5)
    drag = ragscale.compile(drag, ragscale.load_split("hotpotqa", "train")[:16], optimizer="bootstrap", metric="em")
    print(ragscale.evaluate(drag, ragscale.load_split("hotpotqa", "dev")[:20]))

Methods, each a ``dspy.Module`` under its paper's name and a ``Method``:
    ClosedBook, RAG, DRAG, IterDRAG (Yue et al. 2024); MultiQuery, RAGFusion, DecomposeRecursive,
    DecomposeIndividual, StepBackRAG, HyDE, IRCoT, SearchChain, RAT, CRAG, SelfRAG.
Models and data:
    configure (the LM and adapter), load_lm, load_split, load_corpus, retriever (a corpus, a dataset name, a JSONL
    file, a list of texts or a search function).
Compiling and measuring:
    compile (a teleprompter by name, a metric by name or a callable; CompilationFailedError when every program it
    tried falls below its method's floor), evaluate (EM, F1, per-question records, token usage: an
    ``Evaluation``), meter (every LM call's tokens).
Tracked experiments:
    RunConfig and run (what ``ragscale run`` does, tracked in MLflow, the compiled program logged as an MLflow model).

``docs/guide.md`` shows each task in a few lines.
"""

from __future__ import annotations

import importlib
import pkgutil
from importlib.metadata import PackageNotFoundError, version
from typing import Any

# An installed ragscale is found too when a source tree's ragscale/ folder shadows it (Python started in the tree).
__path__ = pkgutil.extend_path(__path__, __name__)

try:
    __version__ = version("ragscale")
except PackageNotFoundError:  # run from a source tree that is not installed
    __version__ = "0+unknown"

METHODS = ("ClosedBook", "RAG", "DRAG", "IterDRAG", "MultiQuery", "RAGFusion", "DecomposeRecursive",
           "DecomposeIndividual", "StepBackRAG", "HyDE", "IRCoT", "SearchChain", "RAT", "CRAG", "SelfRAG")  # fmt: skip

_HOMES = {
    "Method": "ragscale.programs.base",
    **dict.fromkeys(METHODS, "ragscale.programs"),
    "load_lm": "ragscale.programs.lm",
    "meter": "ragscale.programs.lm",
    "RunConfig": "ragscale.experiments.config",
    **dict.fromkeys(("configure", "load_split", "load_corpus"), "ragscale.inputs"),
    "retriever": "ragscale.retrievers",
    "compile": "ragscale.compiling",
    "CompilationFailedError": "ragscale.optimizers.floors",
    "evaluate": "ragscale.evaluation",
    "Evaluation": "ragscale.evaluation",
    "run": "ragscale.runs",
}
"""Each public name and the module it lives in, imported the first time the name is asked for (PEP 562)."""

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'ragscale' has no attribute {name!r}; it offers {', '.join(__all__)}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value  # asked once: later lookups find it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
