"""A sweep configuration's effective context (input tokens of all LM calls per question), estimated before it runs.

What is estimated, per grid point (method, documents k, shots m, iterations n; see `sweep.Point`): the expected
input tokens, output tokens and LM calls of one question (`Estimate`), with the fewest input tokens the point can
take (`low`: IterDRAG stopping at its first decomposition, every reply read at once), the most without retries
(`high`: every iteration used) and its longest single call (for the context-window check). How:

- **Per call, the prompt itself.** `ContextEstimator` builds the point's program and, for the run's first 20 real
  questions, renders each LM call it makes through the real adapter (the FieldAdapter asks once per output field)
  and the LM's chat template, and counts it with the LM's tokenizer (`prompt_tokens`; an LM without a local engine:
  `count_tokens` on the messages plus 4 tokens of markup each). The documents are those the sweep's retriever finds
  for each question (without one, the data's own paragraphs); the shots are the labeled demonstrations the
  teleprompter would pick (`labeled_fields`: the same train questions, with the documents retrieved for them).
- **IterDRAG per path.** Its forward pass is replayed without the LM once per number of follow-ups j = 0..n: path j
  asks j follow-ups, then -- when j < n -- decomposes once more and stops, then synthesizes over the documents
  gathered. The follow-ups are those seen asked for the question in a finished configuration (`observe`); past
  those, stand-ins (the question itself with its gold answer, and the next k documents it ranks).
- **Calibration from finished configurations.** What the tokens cannot say -- how many follow-ups IterDRAG asks
  before it stops, how often the adapter must ask again for a reply it could not read -- is learned from the
  per-question records (``predictions.jsonl``, `run_records`) of the configurations of the same method and shot
  count already finished in the sweep (`Planner.calibration`, `ContextEstimator.calibrate`): IterDRAG's follow-up
  rate per decomposition step, and the ratios of the counted input tokens, output tokens and calls to those of the
  paths the questions took (`Calibration`). With none of its shot count, IterDRAG takes the follow-up rates of its
  other shot counts and no retry ratios.
- **Bounds and floors when nothing is known.** IterDRAG at every iteration (an upper bound on its calls; also past
  the last step a finished run decided at), a single-step method's calls once each (a floor that retries add to).

Each estimate names its basis: "calibrated (N runs)", "follow-ups (N runs)" (IterDRAG's rates from other shot
counts), "bound" or "counted". `Planner` also turns an estimate into seconds with the sweep's measured `Speed`.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import random
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragscale.experiments import tracking
from ragscale.experiments.config import ConfigError, RunConfig

if TYPE_CHECKING:
    from ragscale.experiments.sweep import Point, Speed
    from ragscale.programs.retrieval import Passage

log = logging.getLogger(__name__)

BASELINE = "closed-book"  # the sweep's baseline method: no documents, its question alone


def prompt_tokens(lm, messages: list[dict]) -> int:
    """Input tokens of one call: the LM's chat template rendered and tokenized when its engine can (a local
    model), else the messages' text counted with `count_tokens` plus 4 tokens of markup per message."""
    from ragscale.programs.lm import count_tokens

    engine = getattr(lm, "engine", None)
    if hasattr(engine, "render_messages") and hasattr(engine, "count_tokens"):
        return engine.count_tokens(engine.render_messages(messages))
    return sum(count_tokens(lm, str(m["content"])) + 4 for m in messages)


Call = tuple[int, int]  # (input tokens, expected output tokens) of one LM call
Calls = list[Call]  # the calls of one question along one path through a program


@dataclass(frozen=True)
class Calibration:
    """What finished configurations taught (see `ContextEstimator.calibrate`): how often IterDRAG asked another
    follow-up when it could, and how far the counted input tokens, output tokens and calls ran over those of the
    paths the questions took (adapter retries of unreadable replies; real sub-questions instead of stand-ins)."""

    runs: int
    follow_up_rates: tuple[float, ...]  # per step s: P(another follow-up | a decomposition at step s); () if none
    input_ratio: float = 1.0
    output_ratio: float = 1.0
    call_ratio: float = 1.0
    retries_known: bool = True  # False: follow-up rates from other shot counts, ratios left at 1

    def reaching(self, step: int) -> float:
        """P(a question gets to decompose at `step`), steps no run observed counted as another follow-up."""
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


def estimate_fields(estimate: Estimate) -> dict[str, Any]:
    """What a finished configuration keeps of the estimate made just before it ran (its ledger row, its tag)."""
    return {
        "estimated_tokens": round(estimate.tokens, 1),
        "estimated_calls": round(estimate.calls, 2),
        "estimate_basis": estimate.basis,
    }


class ContextEstimator:
    """Estimates the effective context of grid points from real questions (see the module docstring)."""

    def __init__(
        self, lm, adapter, train: Sequence, evalset: Sequence, *, retriever=None, sample: int = 20, seed: int = 0
    ):
        from ragscale.programs.retrieval import Passage

        self.lm, self.adapter, self.retriever, self.seed = lm, adapter, retriever, seed
        self.train = list(train)
        self.evalset = list(evalset)[:sample]
        if not self.evalset:
            raise ConfigError("no evaluation questions to estimate the context from")
        self._pool = [
            Passage(id=f"pool-{i}", title=p["title"], text=p["text"])
            for i, p in enumerate(
                p for ex in [*self.evalset, *self.train[:50]] for p in (getattr(ex, "paragraphs", None) or [])
            )
        ] or [Passage(id="pool-0", title="", text="")]
        self._rankings: dict[tuple[str, int], list[Passage]] = {}
        self._cache: dict[str, tuple[Call, ...]] = {}
        self._asked: dict[str, list[tuple[str, str]]] = {}  # question id -> (sub-question, sub-answer) seen asked

    def ranking(self, query: str, k: int) -> list[Passage]:
        """The k passages the retriever finds for `query`, most relevant first; without a retriever, the first k
        paragraphs of the pool (the data's own paragraphs)."""
        if (query, k) not in self._rankings:
            if self.retriever is None:
                self._rankings[query, k] = list(itertools.islice(itertools.cycle(self._pool), k))
            else:
                self._rankings[query, k] = list(self.retriever(query, k))
        return self._rankings[query, k]

    def retrieve(self, query: str, k: int) -> list[str]:
        """The k documents found for `query` as a program formats them (most relevant last)."""
        from ragscale.programs.retrieval import format_passage, most_relevant_last

        return [format_passage(p) for p in most_relevant_last(self.ranking(query, k))]

    def observe(self, records: Iterable[Mapping]) -> None:
        """Keep the follow-ups IterDRAG asked (with their answers) per question: later estimates use them as the
        sub-questions of those questions instead of stand-ins."""
        for record in records:
            asked = list(zip(record.get("sub_questions") or [], record.get("intermediate_answers") or [], strict=False))
            if len(asked) >= len(self._asked.get(str(record["id"]), [])):
                self._asked[str(record["id"])] = asked

    def demos(self, program, shots: int, docs_per_demo: int) -> dict[str, list[dict]]:
        """Per predictor, the labeled demonstrations the `labeled` teleprompter would give it (the same sample of
        train questions, each with the documents retrieved for it)."""
        from ragscale.optimizers.teleprompters import labeled_fields

        if shots == 0 or not self.train:
            return {}
        keep = getattr(program, "demo_documents", True)
        picked = random.Random(self.seed).sample(self.train, min(shots, len(self.train)))

        def documents(query: str) -> list[str] | None:
            if not keep or getattr(program, "retriever", None) is None:
                return None
            return self.retrieve(query, docs_per_demo)

        offered = [fields for ex in picked for fields in labeled_fields(ex, documents)]
        out = {}
        for name, predictor in program.named_predictors():
            needed = set(predictor.signature.fields) - {"documents"}
            fits = [f for f in offered if needed <= f.keys()]
            out[name] = [{n: f[n] for n in predictor.signature.fields if n in f} for f in fits][:shots]
        return out

    def _calls(self, predictor, demos: list[dict], inputs: dict) -> list[tuple[int, int]]:
        """(input tokens, expected output tokens) of each LM call one predictor call makes with this adapter."""
        from ragscale.programs.lm.adapter import FieldAdapter

        signature = predictor.signature
        base = self.adapter.format(signature, demos, inputs)
        outputs = {
            name: (True if field.annotation is bool else str(inputs.get("question", "")))
            for name, field in signature.output_fields.items()
        }
        if not isinstance(self.adapter, FieldAdapter):
            return [(prompt_tokens(self.lm, base), 16 * len(outputs))]
        calls, prefix = [], ""
        for name, field in signature.output_fields.items():
            messages, _ = self.adapter._field_request(self.lm, {}, signature, base, prefix, name)
            out = 2 if field.annotation is bool else 16
            calls.append((prompt_tokens(self.lm, messages), out))
            rendered = self.adapter.format_field_value(field, outputs[name])
            prefix += f"{self.adapter.header(name, field)} {rendered}\n"
        return calls

    def _predictor_calls(self, program, name: str, demos: dict, inputs: dict) -> list[Call]:
        key = json.dumps([name, demos.get(name, []), inputs], sort_keys=True, default=str)
        if key not in self._cache:
            predictor = dict(program.named_predictors())[name]
            self._cache[key] = tuple(self._calls(predictor, demos.get(name, []), inputs))
        return list(self._cache[key])

    def _program(self, point: Point):
        from ragscale.programs import PROGRAMS

        k = max(point.docs, 1)
        cls = PROGRAMS[point.method]
        if point.method == "iterdrag":
            program = cls(retriever=None, k=k, max_iterations=max(point.iterations, 1))
        else:
            program = cls(retriever=None, k=k)
        program.retriever = None if point.method == BASELINE else "stand-in"
        return program

    def paths(self, point: Point, docs_per_demo: int | None = None) -> list[list[Calls]]:
        """Per sample question, the calls of each path the program can take: one for a single-step method; for
        IterDRAG, path j (j = 0..n) asks j follow-ups, then -- when j < n -- decomposes once more and stops, then
        synthesizes over the documents gathered (`_iterdrag_paths`)."""
        docs_per_demo = point.docs if docs_per_demo is None else docs_per_demo
        k = max(point.docs, 1)
        program = self._program(point)
        demos = self.demos(program, point.shots, docs_per_demo)
        out = []
        for example in self.evalset:
            if point.method == "iterdrag":
                out.append(self._iterdrag_paths(program, demos, example, k, max(point.iterations, 1)))
            elif point.method == BASELINE:
                out.append([self._predictor_calls(program, "answer", demos, {"question": example.question})])
            else:
                inputs = {"documents": self.retrieve(example.question, k), "question": example.question}
                out.append([self._predictor_calls(program, "answer", demos, inputs)])
        return out

    def _iterdrag_paths(self, program, demos: dict, example, k: int, n: int) -> list[Calls]:
        """IterDRAG's paths for one question, its forward pass replayed without the LM. The follow-ups are those
        seen asked for this question in a finished configuration (`observe`); past those, stand-ins: the question
        itself answered with its gold answer, and as its documents the next k the question ranks."""
        from ragscale.programs.rag import merge_by_rank
        from ragscale.programs.retrieval import format_passage, most_relevant_last

        question, answer = example.question, (list(example.answers) or [""])[0]
        seen = self._asked.get(str(example.id), [])
        wide = self.ranking(question, k * (n + 1))
        rankings, follow_ups, asked = [self.ranking(question, k)], [], []
        paths = []
        for step in range(n + 1):
            decompose = self._predictor_calls(
                program, "decompose", demos, {"question": question, "follow_ups": follow_ups}
            )
            documents = [format_passage(p) for p in most_relevant_last(merge_by_rank(rankings))]
            synthesize = self._predictor_calls(
                program, "synthesize", demos, {"documents": documents, "question": question, "follow_ups": follow_ups}
            )
            paths.append(asked + (decompose if step < n else []) + synthesize)
            if step == n:
                break
            sub_question, sub_answer = seen[step] if step < len(seen) else (question, answer)
            ranking = self.ranking(sub_question, k) if step < len(seen) else wide[k * (step + 1) : k * (step + 2)]
            inputs = {
                "documents": [format_passage(p) for p in most_relevant_last(ranking)],
                "sub_question": sub_question,
            }
            asked = asked + decompose + self._predictor_calls(program, "answer_sub", demos, inputs)
            rankings.append(ranking)
            follow_ups = [*follow_ups, f"Q: {sub_question} A: {sub_answer}"]
        return paths

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
        """The expected effective context of `point` over the sample. With a calibration: the mean over its paths
        weighted by the learned follow-up rates (`Calibration.weights`), times the learned ratios: "calibrated (N
        runs)", or "follow-ups (N runs)" when only IterDRAG's rates were learned, from other shot counts, with ", bound
        past s steps" when a question may reach a step no finished run decided at. Without one, IterDRAG at every
        iteration ("bound": an upper bound on the program's calls) and a single-step method's calls once each
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
            output_tokens=ratios[1] * expected(lambda p: sum(c[1] for c in p)),
            calls=ratios[2] * expected(len),
            longest_call=max(c[0] + c[1] for ps in paths for p in ps for c in p),
            low=mean(lambda ps: sum(c[0] for c in ps[0])),
            high=mean(lambda ps: sum(c[0] for c in ps[-1])),
            basis=basis,
        )


def run_records(runs_dir: Path, run_id: str) -> list[dict] | None:
    """A finished run's per-question records (`predictions.jsonl`): from its work folder, else its MLflow artifact;
    None when neither can be read."""
    from mlflow.exceptions import MlflowException

    from ragscale.experiments.runner import PREDICTIONS

    path = Path(runs_dir) / "work" / run_id / PREDICTIONS
    try:
        if not path.exists():
            path = tracking.artifact_path(runs_dir, run_id, PREDICTIONS)
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, MlflowException) as exc:
        log.warning("no per-question records for run %s (%s): it calibrates no estimate", run_id, exc)
        return None
    return [json.loads(line) for line in lines if line.strip()]


class Planner:
    """Estimates grid points, calibrated on the configurations finished so far in this sweep (`calibration`):
    `learn` a finished one, and later estimates of its method and shot count use it."""

    def __init__(self, estimator: ContextEstimator, speed: Speed | None, n_questions: int):
        self.estimator, self.speed, self.n_questions = estimator, speed, n_questions
        self.finished: list[tuple[Point, int, list[dict]]] = []
        self._learned: dict[tuple[str, int], Calibration | None] = {}

    @classmethod
    def for_run(cls, base: RunConfig, lm, train: Sequence, evalset: Sequence, *, retriever, speed: Speed | None):
        from ragscale.experiments.runner import make_adapter

        estimator = ContextEstimator(
            lm, make_adapter(base.adapter), train, evalset, retriever=retriever, seed=base.seed
        )
        return cls(estimator, speed, len(evalset))

    def learn(self, point: Point, docs_per_demo: int, records: Sequence[Mapping] | None) -> None:
        if records:
            if point.method == "iterdrag":
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
            if learned is None and point.method == "iterdrag":
                others = self.estimator.calibrate([f for f in self.finished if f[0].method == point.method])
                if others is not None:
                    learned = Calibration(others.runs, others.follow_up_rates, retries_known=False)
            self._learned[group] = learned
        return self._learned[group]

    def estimate(self, point: Point, docs_per_demo: int) -> tuple[Estimate, float]:
        """The estimate of `point` and the seconds it should take (NaN without a speed)."""
        estimate = self.estimator.estimate(point, docs_per_demo, self.calibration(point))
        speed = self.speed
        seconds = self.n_questions * speed.seconds(estimate.tokens, estimate.output_tokens) if speed else float("nan")
        return estimate, seconds
