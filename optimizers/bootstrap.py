"""The ``bootstrap`` teleprompter: DSPy's BootstrapFewShot with the teacher run on several training examples at a
time, keeping every step, shown labeled demonstrations first and topped up with them after.

``Bootstrap`` keeps as demonstrations the program's own traces that pass the metric, so they hold the documents
retrieved during the trace. As DSPy's ``max_labeled_demos`` does with raw examples, the teacher first gets labeled
demonstrations (``labeled``, with documents and, where the data has them, gold decompositions: the form it then
writes its steps in) of the first ``shots`` shuffled training examples, and runs on the others (a training set no
larger than ``shots`` is all run on, with no labeled demos shown); predictors left short of ``shots`` are topped up
with labeled demonstrations. With ``teacher_lm`` the teacher copy runs on that LM (DSPy's ``teacher_settings``).

DSPy's loop runs one example after another, so a local engine that batches concurrent requests never gets a batch
to work on. ``ThreadedBootstrapFewShot`` keeps DSPy's selection (the first passing traces in training order) and
runs the examples in groups. Where a predictor ran several times in one trace, DSPy keeps one of those calls, the
last or one of the others at even odds; for IterDRAG the last decomposition is the "none" that ended the loop, so
a compiled program could see only stops and learn never to ask. Here every call of a passing trace is a
demonstration of its predictor, in the order the program made them: a decomposition demo set shows the follow-up
asked, then the stop.
"""

import contextvars
import copy
import logging
import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import dspy

from ragscale.optimizers.base import Teleprompter, keeping_behaviour
from ragscale.optimizers.demos import LabeledWithDocuments
from ragscale.programs.base import Method

logger = logging.getLogger(__name__)


class ThreadedBootstrapFewShot(dspy.BootstrapFewShot):
    """``dspy.BootstrapFewShot`` that runs the teacher on ``threads`` training examples at a time and keeps every
    call of a passing trace (see the module docstring).

    DSPy's loop runs one example after another, so a local engine never gets a batch to work on. Here each
    group of ``threads`` examples runs at once (the callers' DSPy settings carried into the workers) and the
    traces are kept in training order, stopping at ``max_bootstrapped_demos``: with a deterministic LM these are
    the demonstrations the sequential loop keeps. A group may run up to ``threads - 1`` examples past the last
    one needed.
    """

    def __init__(self, *args: Any, threads: int = 1, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.threads = max(1, threads)

    def _bootstrap_one_example(self, example: dspy.Example, round_idx: int = 0) -> bool:
        """Run the teacher on ``example`` (DSPy's settings: the teacher's, a fresh rollout at temperature 1.0 after
        round 0) and, if the metric passes, add every call of its trace to ``name2traces``."""
        trace: list = []
        success = False
        teacher = self._teacher_without(example)
        try:
            with dspy.context(trace=[], **self.teacher_settings):
                lm = dspy.settings.lm
                if round_idx > 0:
                    lm = lm.copy(rollout_id=round_idx, temperature=1.0)
                with dspy.context(lm=lm):
                    prediction = teacher(**example.inputs())
                    trace = list(dspy.settings.trace)
            if self.metric is None:
                success = True
            else:
                score = self.metric(example, prediction, trace)
                success = score >= self.metric_threshold if self.metric_threshold else bool(score)
        except Exception as error:
            with self.error_lock:
                self.error_count += 1
                errors = self.error_count
            if errors >= (self.max_errors if self.max_errors is not None else dspy.settings.max_errors):
                raise
            logger.error("could not run or score training example %s: %s", example, error)
        if success:
            names = {id(predictor): name for name, predictor in teacher.named_predictors()}
            for predictor, inputs, outputs in trace:
                name = names.get(id(predictor))
                if name is not None:
                    self.name2traces[name].append(dspy.Example(augmented=True, **inputs, **outputs))
        return success

    def _teacher_without(self, example: dspy.Example) -> dspy.Module:
        """The teacher, or, when one of its predictors has ``example`` among its demonstrations, a copy without it:
        as DSPy does, a training example is hidden from the teacher's own demos, so that its trace is not the demo
        copied. A copy rather than DSPy's edit of the shared teacher in place, which threads would race on."""
        if not any(example in predictor.demos for _, predictor in self.teacher.named_predictors()):
            return self.teacher
        teacher = self.teacher.deepcopy()
        for _, predictor in teacher.named_predictors():
            predictor.demos = [demo for demo in predictor.demos if demo != example]
        return teacher

    def _bootstrap(self, *, max_bootstraps: int | None = None) -> None:
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


class Bootstrap(Teleprompter):
    """``bootstrap`` (see the module docstring): ``max_attempts`` caps the training examples the teacher runs on
    (default: all of them, until ``shots`` traces pass), ``threads`` how many it runs at once."""

    name = "bootstrap"

    def __init__(
        self, *, seed: int = 0, threads: int = 1, teacher_lm: dspy.LM | None = None, max_attempts: int | None = None,
        **shared: Any,
    ):  # fmt: skip
        super().__init__(**shared)
        self.seed, self.threads, self.teacher_lm, self.max_attempts = seed, threads, teacher_lm, max_attempts

    def learn(self, student: Method, trainset: list, valset: list | None) -> Method:
        shots = self.shots
        trainset = random.Random(self.seed).sample(trainset, len(trainset))
        shown = trainset[:shots] if len(trainset) > shots else []  # shown to the teacher, not run on
        attempted = trainset[len(shown) :]
        teleprompter = ThreadedBootstrapFewShot(
            metric=keeping_behaviour(self.metric, student),
            max_bootstrapped_demos=shots,
            max_labeled_demos=0,
            teacher_settings=self.teacher_settings,
            threads=self.threads,
        )
        teacher = self._labeled(student, shown)
        compiled = teleprompter.compile(student, teacher=teacher, trainset=attempted[: self.max_attempts])
        shown = {demo.get("question") for predictor in compiled.predictors() for demo in predictor.demos}
        labeled = self._labeled(student, [example for example in trainset if example.question not in shown])
        for mine, extra in zip(compiled.predictors(), labeled.predictors(), strict=True):
            mine.demos = list(mine.demos) + extra.demos[: max(0, shots - len(mine.demos))]
        return compiled

    def _labeled(self, student: Method, examples: list) -> Method:
        return LabeledWithDocuments(self.shots, self.docs_per_demo, self.seed).compile(student, trainset=examples)
