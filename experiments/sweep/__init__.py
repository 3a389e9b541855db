"""Inference scaling, measured: a budget sweep over documents, shots and iterations (Yue et al. 2024, arXiv:2410.04343).

A sweep is a grid of configurations theta = (documents k, shots m, iterations n) per method, plus closed-book with
0 and 1 shot for the allocation model's informativeness (``grid.py``). In order:

1. **Estimate** (``estimate.py``). Each configuration's effective context (all input tokens of all LM calls for one
   question) is estimated before it runs: the program run on the run's first 20 questions with the model played by
   a script, its calls rendered through the real adapter and counted with the LM's tokenizer, calibrated on the
   finished configurations of the same method and shot count, else a bound (IterDRAG) or a counted floor.
2. **Plan** (``plan.py``, ``speed.py``). Time per configuration = questions x (input tokens / prefill rate + the
   square of a call's tokens x a constant + output tokens / decode rate), fitted on earlier runs of this LM or
   timed; the configurations run cheapest first. A configuration is skipped when it
   cannot fit (its fewest tokens exceed the largest budget, or its longest call the LM's window), or when an
   estimate learned from finished configurations puts it past the largest budget, where no budget could choose it.
3. **Run** (``run.py``, ``sitting.py``, ``setup.py``, ``ledger.py``). Each configuration is one MLflow child run
   under a parent sweep run; finished ones are keyed by their settings and data, kept in ``ledger.json`` and tagged
   on their run, so a rerun skips them. ``parallel_runs`` configurations run at once, each on the least busy of the
   servers given (``replicas.py``); a program is compiled once per method and shot count (``compiling.py``); a time
   limit, Ctrl-C or SIGTERM ends the runs in flight (``stopping.py``); the oracle rows run last (``oracle_rows.py``).
4. **Results** (``outcome.py``, ``report.py``, ``allocation.py``). Per budget, the best configuration per method and
   overall (the paper's Table 1 shape); accuracy against effective context (log x); the computation allocation model,
   fitted and stored as ``allocation.json``, which ``allocate`` reads.
5. **Claims** (``claims.py``, ``scores.py``). Each of the paper's claims with paired 95% CIs over the questions and a
   verdict; each run's per-question Acc is kept in ``scores.json``, from which ``scores.recheck`` checks the claims
   again with no model or MLflow store.
6. **Published** (``adopt.py``). The finished rows committed with their per-question records (``ragscale.published``
   writes them and makes the table, grid, claims and model again); a sweep on a fresh machine adopts them and runs
   only the rest.

The package imports nothing itself: ``from ragscale.experiments.sweep.run import run_sweep`` and so on.
"""
