"""DSPy's BootstrapFewShot with the teacher run on several training examples at a time.

DSPy's loop runs one example after another, so a local engine that batches concurrent requests never gets a batch
to work on. ``ThreadedBootstrapFewShot`` keeps DSPy's selection (the first passing traces in training order) and
runs the examples in groups.
"""

import logging
import random
from typing import Any

import dspy

logger = logging.getLogger(__name__)


class ThreadedBootstrapFewShot(dspy.BootstrapFewShot):
    """``dspy.BootstrapFewShot`` that runs the teacher on ``threads`` training examples at a time.

    DSPy's loop runs one example after another, so a local engine never gets a batch to work on. Here each
    group of ``threads`` examples runs at once (the callers' DSPy settings carried into the workers) and the
    traces are kept in training order, stopping at ``max_bootstrapped_demos``: with a deterministic LM these are
    the demonstrations the sequential loop keeps. A group may run up to ``threads - 1`` examples past the last
    one needed.
    """

    def __init__(self, *args: Any, threads: int = 1, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.threads = max(1, threads)

    def _bootstrap(self, *, max_bootstraps: int | None = None) -> None:
        import contextvars
        import copy
        from concurrent.futures import ThreadPoolExecutor

        max_bootstraps = max_bootstraps or self.max_bootstrapped_demos
        self.name2traces = {name: [] for name in self.name2predictor}
        bootstrapped: set[int] = set()

        def attempt(example: dspy.Example) -> dict[str, list] | None:
            """The traces of ``example``'s first passing round, or None."""
            for round_idx in range(self.max_rounds):
                scratch = copy.copy(self)  # shares teacher, metric and error count; its own traces
                scratch.name2traces = {name: [] for name in self.name2predictor}
                if scratch._bootstrap_one_example(example, round_idx):
                    return scratch.name2traces
            return None

        with ThreadPoolExecutor(self.threads) as pool:
            for start in range(0, len(self.trainset), self.threads):
                if len(bootstrapped) >= max_bootstraps:
                    break
                group = enumerate(self.trainset[start : start + self.threads], start)
                runs = [(i, pool.submit(contextvars.copy_context().run, attempt, ex)) for i, ex in group]
                for index, run in runs:
                    traces = run.result()
                    if traces is not None and len(bootstrapped) < max_bootstraps:
                        bootstrapped.add(index)
                        for name, demos in traces.items():
                            self.name2traces[name].extend(demos)
        logger.info("bootstrapped %d traces from %d training examples", len(bootstrapped), len(self.trainset))
        self.validation = [x for i, x in enumerate(self.trainset) if i not in bootstrapped]
        random.Random(0).shuffle(self.validation)
