"""Results published: benchmarks' and sweeps' per-question records committed under ``benchmarks/results/``, and the
docs pages whose every number is made again from them.

The folder writes a published folder from finished runs (``runs``: a method table; ``sweeps``: a sweep; ``graders``,
``documents``, ``cells``: the other benchmarks' rows), reads it back with every score re-derived from the records,
makes its tables again (the papers' core claims too, ``core_claims``), and renders the directives through which a
page cites them (``directives``, ``pages``). Only ``benchmarks/`` scripts and the tests import it: nothing a run
does at runtime needs it. What the runtime reads of a published folder, a sweep adopting a published sweep
(``ragscale sweep --adopt``), lives in ``experiments.sweep.adopt``, and this folder reads the format from there.
"""
