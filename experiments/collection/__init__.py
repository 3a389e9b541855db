"""Document collections: ``ragscale ingest`` files into a named collection, ``ragscale ask`` it a question.

``store.py`` is the collection on disk and its indexes, ``ingest.py`` adds files, ``contextualize.py`` writes
contextual retrieval's chunk contexts, ``ask.py`` answers over it with sources.
"""

from ragscale.experiments.collection.ask import ask, sources
from ragscale.experiments.collection.contextualize import contextualize_chunks
from ragscale.experiments.collection.ingest import IngestReport, ingest
from ragscale.experiments.collection.store import Collection

__all__ = ["Collection", "IngestReport", "ask", "contextualize_chunks", "ingest", "sources"]
