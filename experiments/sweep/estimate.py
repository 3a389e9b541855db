"""A sweep configuration's effective context (input tokens of all LM calls per question), estimated before it runs.

One concept in one file: the estimate of a grid point, from the paths its program can take to their calibration.

What is estimated, per grid point (method, documents k, shots m, iterations n; see ``grid.Point``): the expected
input tokens, output tokens and LM calls of one question (``Estimate``), with the fewest input tokens the point can
take (``low``: IterDRAG stopping at its first decomposition, every reply read at once), the most without retries
(``high``: every iteration used) and its longest single call (for the context-window check). How:

- **The program itself, with the model played by a script.** ``ContextEstimator`` builds the point's program with
  the labeled demonstrations its teleprompter gives it, and runs it on the run's first 20 real questions with a
  ``ScriptedAdapter`` (``script.py``) in place of the model: each predictor call asks the real adapter for the
  requests it would send (``FieldAdapter.requests``; any other adapter's ``format``), counts them with the LM's chat
  template and tokenizer (``prompt_tokens``), and returns the script's outputs instead of calling the LM. The
  documents are those the sweep's retriever finds (without one, the data's own paragraphs).
- **One run per path.** The script plays path j (j = 0..n): a step decision (a predictor that writes a
  ``follow_up`` or has a yes/no output: IterDRAG's decomposition) asks on its first j calls and writes "none" (or
  no) after; the follow-up it asks is the one seen asked for the question at that step in a finished
  configuration (``observe``), else a stand-in whose documents are the next k the question ranks
  (``StandIns``); any other text output is an answer: the one seen for that follow-up, else the gold answer. A
  single-step method has one path.
- **Calibration from finished configurations.** What the tokens cannot say -- how many follow-ups IterDRAG asks
  before it stops, how often the adapter must ask again for a reply it could not read -- is learned from the
  per-question records (``predictions.jsonl``) of the configurations of the same method and shot count already
  finished in the sweep (``Planner.calibration``, ``ContextEstimator.calibrate``): IterDRAG's follow-up rate per
  decomposition step, and the ratios of the counted input tokens, output tokens and calls to those of the paths
  the questions took (``Calibration``). With none of its shot count, IterDRAG takes the follow-up rates of its
  other shot counts and no retry ratios.
- **What a prefix cache holds.** A call's leading messages that are the same as those of a call the sample's
  previous question made (its first question: the last's), or of an earlier call of its own question -- the
  system turn, the demonstrations, a step's prompt so far -- are counted as ``reused``: an engine with a prefix cache
  computes them once, so they take no time (``Speed.seconds``) though they are effective context all the same.
- **Bounds and floors when nothing is known.** IterDRAG at every iteration (an upper bound on its steps; also past
  the last step a finished run decided at), a single-step method's calls once each: retries add to both.

Each estimate names its basis: "calibrated (N runs)", "follow-ups (N runs)" (IterDRAG's rates from other shot
counts), "bound" or "counted". ``Planner`` also turns an estimate into seconds with the sweep's measured ``Speed``.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dspy

from ragscale.experiments.config import ConfigError, RunConfig
from ragscale.experiments.sweep.grid import Point
from ragscale.experiments.sweep.script import Messages, Script, ScriptedAdapter, StandIns, with_a_chain
from ragscale.optimizers.metrics import em_metric
from ragscale.optimizers.teleprompters import compile_program
from ragscale.programs import build_program, method_named
from ragscale.programs.lm import FieldAdapter, make_adapter, prompt_tokens
from ragscale.programs.lm.prefix_cache import common_prefix
from ragscale.programs.retrieval import Passage

if TYPE_CHECKING:
    from ragscale.experiments.sweep.speed import Speed

SAMPLE = 20
"""Questions of the run an estimate is made on."""

Call = tuple[int, int, int]  # (input tokens, expected output tokens, input tokens a prefix cache holds) of one LM call
Calls = list[Call]  # the calls of one question along one path through a program


@dataclass(frozen=True)
class Calibration:
    """What finished configurations taught (see ``ContextEstimator.calibrate``): how often IterDRAG asked another
    follow-up when it could, and how far the counted input tokens, output tokens and calls ran over those of the
    paths the questions took (adapter retries of unreadable replies; real sub-questions instead of stand-ins)."""

    runs: int
    follow_up_rates: tuple[float, ...]  # per step s: P(another follow-up | a decomposition at step s); () if none
    input_ratio: float = 1.0
    output_ratio: float = 1.0
    call_ratio: float = 1.0
    retries_known: bool = True  # False: follow-up rates from other shot counts, ratios left at 1

    def reaching(self, step: int) -> float:
        """P(a question gets to decompose at ``step``), steps no run observed counted as another follow-up."""
        return math.prod(self.follow_up_rates[:step])

    def weights(self, n: int) -> list[float]:
        """P(j follow-ups asked), j = 0..n, for a program allowed n: past the observed steps, the bound."""
        rates = [*self.follow_up_rates[:n], *[1.0] * (n - len(self.follow_up_rates))]
        return [self.reaching(j) * (1 - rates[j]) for j in range(n)] + [self.reaching(n)]


@dataclass(frozen=True)
class Estimate:
    tokens: float  # expected effective context per question (input tokens of all calls): what the plan shows
    output_tokens: float
    calls: float
    longest_call: int  # the largest single call of the sample, every iteration used: for the context-window check
    low: float  # the fewest tokens: IterDRAG stopping at its first decomposition, every reply read at the first try
    high: float  # every iteration used, every reply read at the first try
    basis: str  # "calibrated (N runs)", "follow-ups (N runs)", "bound" or "counted": see `ContextEstimator.estimate`
    reused: float = 0.0  # of ``tokens``, those a prefix cache holds (see the module docstring): not computed

    @property
    def learned(self) -> bool:
        """Whether every step of it is learned from finished configurations: neither a bound nor a floor."""
        return self.basis.startswith(("calibrated", "follow-ups")) and "bound" not in self.basis


def estimate_fields(estimate: Estimate) -> dict[str, Any]:
    """What a finished configuration keeps of the estimate made just before it ran (its ledger row, its tag)."""
    return {
        "estimated_effective_context": round(estimate.tokens, 1),
        "estimated_calls": round(estimate.calls, 2),
        "estimate_basis": estimate.basis,
    }


class ContextEstimator:
    """Estimates the effective context of grid points from real questions (see the module docstring)."""

    def __init__(
        self, lm, adapter, train: Sequence, evalset: Sequence, *, retriever=None, sample: int = SAMPLE, seed: int = 0
    ):
        self.lm, self.adapter, self.seed = lm, adapter, seed
        self.train = list(train)
        self.evalset = list(evalset)[:sample]
        if not self.evalset:
            raise ConfigError("no evaluation questions to estimate the context from")
        pool = [
            Passage(id=f"pool-{i}", title=p["title"], text=p["text"])
            for i, p in enumerate(
                p for ex in [*self.evalset, *self.train[:50]] for p in (getattr(ex, "paragraphs", None) or [])
            )
        ] or [Passage(id="pool-0", title="", text="")]
        self.stand_ins = StandIns(retriever, pool)
        self._programs: dict[tuple[Point, int | None], Any] = {}
        self._tokens: dict[str, int] = {}
        self._asked: dict[str, list[tuple[str, str]]] = {}  # question id -> (sub-question, sub-answer) seen asked

    def observe(self, records: Iterable[Mapping]) -> None:
        """Keep the follow-ups IterDRAG asked (with their answers) per question: later estimates use them as the
        sub-questions of those questions instead of stand-ins."""
        for record in records:
            asked = list(zip(record.get("sub_questions") or [], record.get("intermediate_answers") or [], strict=False))
            if len(asked) >= len(self._asked.get(str(record["id"]), [])):
                self._asked[str(record["id"])] = asked

    def count(self, signature, demos, inputs, outputs) -> list[tuple[Messages, int, int]]:
        """(messages, input tokens, expected output tokens) of each LM call one predictor call makes with this
        adapter."""
        if isinstance(self.adapter, FieldAdapter):
            requests = self.adapter.requests(self.lm, signature, demos, inputs, outputs)
            expected = [2 if field.annotation is bool else 16 for field in signature.output_fields.values()]
        else:
            requests = [self.adapter.format(signature, demos, inputs)]
            expected = [16 * len(signature.output_fields)]
        return [(messages, self.tokens(messages), out) for messages, out in zip(requests, expected, strict=True)]

    def tokens(self, messages: Messages) -> int:
        """The input tokens of a request of ``messages``, counted once per distinct request."""
        key = json.dumps(messages, sort_keys=True, default=str)
        if key not in self._tokens:
            self._tokens[key] = prompt_tokens(self.lm, messages)
        return self._tokens[key]

    def reused(self, messages: Messages, tokens: int, earlier: Iterable[Messages]) -> int:
        """Of a request's ``tokens``, those a prefix cache holds after the ``earlier`` requests: its leading
        messages the same as one of theirs, counted as a request of their own (at least one token is computed)."""
        shared = max((common_prefix(messages, other) for other in earlier), default=0)
        return min(self.tokens(messages[:shared]), tokens - 1) if shared else 0

    def program(self, point: Point, docs_per_demo: int | None = None):
        """The point's program over the stand-in retriever, with the demonstrations the ``labeled`` teleprompter
        gives it (``docs_per_demo`` documents each, by default the point's k); built once per point. A method that
        iterates is taught chains (``grid.optimizer_of``): a training question without a decomposition stands in
        for one (``_with_a_chain``), so its demonstrations have the shape of a bootstrapped chain: follow-ups asked,
        the documents retrieved for each and its answer, then "none"."""
        if (point, docs_per_demo) not in self._programs:
            k = max(point.docs, 1)
            program = build_program(point.method, self.stand_ins, k=k, iterations=max(point.iterations, 1))
            if point.shots and self.train:
                per_demo = point.docs if docs_per_demo is None else docs_per_demo
                train = self.train
                if method_named(point.method).iterates:
                    train = [with_a_chain(example) for example in train]
                program = compile_program(
                    program,
                    train,
                    optimizer="labeled",
                    metric=em_metric,
                    shots=point.shots,
                    docs_per_demo=per_demo,
                    seed=self.seed,
                )
            self._programs[point, docs_per_demo] = program
        return self._programs[point, docs_per_demo]

    def paths(self, point: Point, docs_per_demo: int | None = None) -> list[list[Calls]]:
        """Per sample question, the calls of each path the program can take: one for a single-step method; for
        IterDRAG, path j (j = 0..n) asks j follow-ups, then -- when j < n -- decomposes once more and stops, then
        synthesizes over the documents gathered."""
        program = self.program(point, docs_per_demo)
        n = point.iterations
        sent = []  # per sample question, per path: its requests
        for example in self.evalset:
            seen = self._asked.get(str(example.id), [])
            paths = []
            for follow_ups in range(n + 1):
                adapter = ScriptedAdapter(self, Script(example, follow_ups, seen, self.stand_ins))
                with dspy.context(lm=self.lm, adapter=adapter, trace=None):
                    program(question=example.question)
                paths.append(adapter.requests)
            sent.append(paths)
        out = []
        for question, paths in enumerate(sent):  # each after the previous question (the first: the last) on its path
            before = sent[question - 1] if len(sent) > 1 else [[] for _ in paths]
            out.append([self._calls(path, other) for path, other in zip(paths, before, strict=True)])
        return out

    def _calls(self, path: list[tuple[Messages, int, int]], before: list[tuple[Messages, int, int]]) -> Calls:
        """A path's calls, each with what a prefix cache holds of it after ``before`` and the path's earlier calls."""
        earlier = [messages for messages, *_ in before]
        calls = []
        for messages, tokens, output in path:
            calls.append((tokens, output, self.reused(messages, tokens, earlier)))
            earlier.append(messages)
        return calls

    def calibrate(self, finished: Iterable[tuple[Point, int | None, Sequence[Mapping]]]) -> Calibration | None:
        """Learn from finished configurations -- (point, documents per demo, the run's per-question records) -- of one
        method: at each decomposition step, the share of IterDRAG's decompositions that asked another follow-up (a
        question that used j of n iterations decided at steps 0..min(j, n - 1) and asked at steps 0..j - 1), and the
        ratios of the counted input tokens, output tokens and calls to those of the paths the sample questions took.
        None when no record matches a sample question."""
        asked: Counter[int] = Counter()
        decided: Counter[int] = Counter()
        counted: list[tuple[float, float, float]] = []  # per matched question: input tokens, output tokens, calls
        predicted: list[tuple[float, float, float]] = []  # the same of the path it took
        runs = 0
        for point, docs_per_demo, records in finished:
            by_id = {str(r["id"]): r for r in records}
            matched = 0
            for example, paths in zip(self.evalset, self.paths(point, docs_per_demo), strict=True):
                record = by_id.get(str(example.id))
                if record is None:
                    continue
                n = len(paths) - 1
                used = min(len(record.get("sub_questions") or []), n)
                asked.update(range(used))
                decided.update(range(min(used + 1, n)))
                path = paths[used]
                counted.append((record["input_tokens"], record["output_tokens"], record["lm_calls"]))
                predicted.append((sum(c[0] for c in path), sum(c[1] for c in path), len(path)))
                matched += 1
            runs += matched > 0
        totals = [(sum(c[i] for c in counted), sum(p[i] for p in predicted)) for i in range(3)]
        if not runs or not all(p for _, p in totals):
            return None
        rates = tuple(asked[step] / decided[step] for step in range(len(decided)))
        return Calibration(runs, rates, *[c / p for c, p in totals])

    def estimate(
        self, point: Point, docs_per_demo: int | None = None, calibration: Calibration | None = None
    ) -> Estimate:
        """The expected effective context of ``point`` over the sample. With a calibration: the mean over its paths
        weighted by the learned follow-up rates (``Calibration.weights``), times the learned ratios: "calibrated (N
        runs)", or "follow-ups (N runs)" when only IterDRAG's rates were learned, from other shot counts, with ",
        bound past s steps" when a question may reach a step no finished run decided at. Without one, IterDRAG at
        every iteration ("bound": an upper bound on the program's calls) and a single-step method's calls once each
        ("counted": a floor, adapter retries add to it)."""
        paths = self.paths(point, docs_per_demo)
        n = len(paths[0]) - 1
        weights = [0.0] * n + [1.0]  # every iteration: the bound (a single-step method has one path)
        ratios = (1.0, 1.0, 1.0)
        basis = "bound" if n else "counted"
        if calibration is not None:
            weights = calibration.weights(n)
            ratios = (calibration.input_ratio, calibration.output_ratio, calibration.call_ratio)
            runs = f"{calibration.runs} run{'s' * (calibration.runs > 1)}"
            basis = f"calibrated ({runs})" if calibration.retries_known else f"follow-ups ({runs})"
            observed = len(calibration.follow_up_rates)
            if n > observed and calibration.reaching(observed) > 0:
                basis += f", bound past {observed} step{'s' * (observed > 1)}"

        def mean(of: Callable[[list[Calls]], float]) -> float:
            return sum(of(p) for p in paths) / len(paths)

        def expected(of: Callable[[Calls], float]) -> float:
            return mean(lambda ps: sum(w * of(p) for w, p in zip(weights, ps, strict=True)))

        return Estimate(
            tokens=ratios[0] * expected(lambda p: sum(c[0] for c in p)),
            reused=ratios[0] * expected(lambda p: sum(c[2] for c in p)),
            output_tokens=ratios[1] * expected(lambda p: sum(c[1] for c in p)),
            calls=ratios[2] * expected(len),
            longest_call=max(c[0] + c[1] for ps in paths for p in ps for c in p),
            low=mean(lambda ps: sum(c[0] for c in ps[0])),
            high=mean(lambda ps: sum(c[0] for c in ps[-1])),
            basis=basis,
        )


class Planner:
    """Estimates grid points, calibrated on the configurations finished so far in this sweep (``calibration``):
    ``learn`` a finished one, and later estimates of its method and shot count use it."""

    def __init__(self, estimator: ContextEstimator, speed: Speed | None, n_questions: int):
        self.estimator, self.speed, self.n_questions = estimator, speed, n_questions
        self.finished: list[tuple[Point, int, list[dict]]] = []
        self._learned: dict[tuple[str, int], Calibration | None] = {}

    @classmethod
    def for_run(cls, base: RunConfig, lm, train: Sequence, evalset: Sequence, *, retriever, speed: Speed | None):
        estimator = ContextEstimator(
            lm, make_adapter(base.adapter), train, evalset, retriever=retriever, seed=base.seed
        )
        return cls(estimator, speed, len(evalset))

    def learn(self, point: Point, docs_per_demo: int, records: Sequence[Mapping] | None) -> None:
        if records:
            if method_named(point.method).iterates:
                self.estimator.observe(records)
            self.finished.append((point, docs_per_demo, list(records)))
            self._learned.clear()

    def calibration(self, point: Point) -> Calibration | None:
        """Learned from the finished configurations of the same method and shot count (demonstrations change how
        a model replies: retries, follow-ups); without one, IterDRAG's follow-up rates from its other shot counts."""
        group = (point.method, point.shots)
        if group not in self._learned:
            same = [f for f in self.finished if (f[0].method, f[0].shots) == group]
            learned = self.estimator.calibrate(same)
            if learned is None and method_named(point.method).iterates:
                others = self.estimator.calibrate([f for f in self.finished if f[0].method == point.method])
                if others is not None:
                    learned = Calibration(others.runs, others.follow_up_rates, retries_known=False)
            self._learned[group] = learned
        return self._learned[group]

    def estimate(self, point: Point, docs_per_demo: int) -> tuple[Estimate, float]:
        """The estimate of ``point`` and the seconds it should take (NaN without a speed)."""
        estimate = self.estimator.estimate(point, docs_per_demo, self.calibration(point))
        return estimate, self.seconds(estimate)

    def seconds(self, estimate: Estimate) -> float:
        """The seconds the questions of a configuration so estimated should take (NaN without a speed)."""
        e, speed = estimate, self.speed
        return self.n_questions * speed.seconds(e.tokens, e.output_tokens, e.calls, e.reused) if speed else float("nan")
