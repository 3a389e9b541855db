"""The ``bootstrap`` teleprompter: DSPy's BootstrapFewShot with the teacher run on several training examples at a
time, keeping every step, shown labeled demonstrations first and topped up with them after.

``Bootstrap`` keeps as demonstrations the program's own traces that pass the metric, so they hold the documents
retrieved during the trace. As DSPy's ``max_labeled_demos`` does with raw examples, the teacher first gets labeled
demonstrations (``labeled``, with documents and, where the data has them, gold decompositions: the form it then
writes its steps in) of the first ``shots`` shuffled training examples, and runs on the others (a training set no
larger than ``shots`` is all run on, with no labeled demos shown); predictors left short of ``shots`` are topped up
with labeled demonstrations. With ``teacher_lm`` the teacher copy runs on that LM (DSPy's ``teacher_settings``).

DSPy's loop runs one example after another, so a local engine that batches concurrent requests never gets a batch
to work on. ``ThreadedBootstrapFewShot`` runs the examples in groups and keeps every call of a passing trace as a
candidate demonstration of its predictor. Where a predictor ran several times in one trace, DSPy keeps one of those
calls, the last or one of the others at even odds; for IterDRAG the last decomposition is the "none" that ended the
loop, so a compiled program could see only stops and learn never to ask. Keeping every call instead, and taking
the first ``shots``, fills a predictor's shots from one question (its follow-up, then its stop). So each predictor
gets one call from each of ``shots`` distinct training questions (``demos.select_demos``), chosen so that together
they show the method's step (``Method.demo_set_lacks``: for IterDRAG, a chain of two follow-ups, and a stop only
after an answered one); the teacher goes on past ``shots`` passing questions while no set does.
"""

import contextvars
import copy
import logging
import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import dspy

from ragscale.optimizers.base import Teleprompter, keeping_behaviour
from ragscale.optimizers.demos import LabeledWithDocuments, select_demos
from ragscale.programs.base import Method

logger = logging.getLogger(__name__)


class ThreadedBootstrapFewShot(dspy.BootstrapFewShot):
    """``dspy.BootstrapFewShot`` that runs the teacher on ``threads`` training examples at a time and picks each
    predictor's demonstrations from distinct questions (see the module docstring).

    Each group of ``threads`` examples runs at once (the callers' DSPy settings carried into the workers), and the
    passing traces are kept in training order: with a deterministic LM, the questions whose traces become
    demonstrations are those the sequential loop keeps. A group may run up to ``threads - 1`` examples past the
    last one needed.
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
        """Run the teacher on the training examples, ``threads`` at a time in training order, keeping each passing
        one's calls in ``passing``, until ``max_bootstraps`` have passed and every predictor's selection shows the
        method's step (``_selected``), or the examples run out."""
        max_bootstraps = max_bootstraps or self.max_bootstrapped_demos
        self.passing: list[tuple[dspy.Example, dict[str, list]]] = []
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
                if len(bootstrapped) >= max_bootstraps and not any(lacks for *_, lacks in self._selected().values()):
                    break
                group = enumerate(self.trainset[start : start + self.threads], start)
                runs = [(i, pool.submit(contextvars.copy_context().run, attempt, ex)) for i, ex in group]
                for index, run in runs:
                    traces = run.result()
                    if traces is not None:
                        bootstrapped.add(index)
                        self.passing.append((self.trainset[index], traces))
        logger.info("bootstrapped %d traces from %d training examples", len(bootstrapped), len(self.trainset))
        self.validation = [x for i, x in enumerate(self.trainset) if i not in bootstrapped]
        random.Random(0).shuffle(self.validation)

    def _selected(self) -> dict[str, tuple[list, list, str | None]]:
        """Each predictor's demonstrations from the passing traces (``select_demos``: one call from each of up to
        ``max_bootstrapped_demos`` distinct questions, together showing the method's step where any set does)."""
        shots = self.max_bootstrapped_demos
        return {
            name: select_demos(self.student, name, [(ex, traces[name]) for ex, traces in self.passing], shots)
            for name in self.name2predictor
        }

    def _train(self) -> dspy.Module:
        """DSPy's ``_train`` with ``_selected``'s demonstrations in place of the first calls kept: the training
        examples they come from are kept in ``demo_examples``, what a predictor's set still lacks is logged."""
        rng = random.Random(0)
        self.demo_examples: dict[str, list[dspy.Example]] = {}
        selected = self._selected()
        for name, predictor in self.student.named_predictors():
            demos, examples, lacks = selected[name]
            if lacks:
                logger.warning("bootstrapped demonstrations of %s: %s", name, lacks)
            size = max(0, min(self.max_labeled_demos - len(demos), len(self.validation)))
            predictor.demos = demos + rng.sample(self.validation, size)
            self.demo_examples[name] = examples
        return self.student


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
        shown = {id(example) for examples in teleprompter.demo_examples.values() for example in examples}
        labeled = self._labeled(student, [example for example in trainset if id(example) not in shown])
        for mine, extra in zip(compiled.predictors(), labeled.predictors(), strict=True):
            mine.demos = list(mine.demos) + extra.demos[: max(0, shots - len(mine.demos))]
        return compiled

    def _labeled(self, student: Method, examples: list) -> Method:
        return LabeledWithDocuments(self.shots, self.docs_per_demo, self.seed).compile(student, trainset=examples)
