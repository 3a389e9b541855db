"""IterDRAG: iterative demonstration-based RAG, a self-ask loop of sub-queries, retrieval and sub-answers.

Yue et al. 2024, "Inference Scaling for Long-Context RAG" (arXiv:2410.04343), section 3.3: documents are
retrieved for the question; then, up to n times, the model writes a sub-query, documents are retrieved for it
and an intermediate answer is generated; when the model judges that no further sub-query is needed, it gives
the final answer from the question, the sub-queries with their answers and every document retrieved so far.
Demonstrations carry their documents as in DRAG. In DSPy the three kinds of generation are three predictors:
``self.decompose`` (Decompose), ``self.answer_sub`` (AnswerSub over the sub-query's k documents) and
``self.synthesize`` (Synthesize over every gathered document, deduplicated, ordered by the best rank each reached,
most relevant last).

The decomposition step does not read the documents: the paper's model has them in its context when it writes a
sub-query, but given them Qwen2.5-Coder-0.5B writes statements and answers in place of follow-up questions
(``docs/methods.md``). As in the paper's self-ask form, a decomposition step writes the next follow-up question
first, and writing "none" is how the model says the follow-ups answered so far are enough: asking is the path the
model takes, not a yes/no gate it must pass before any sub-question exists.

A small model's greedy "follow-up" is often the question itself, restated: not a sub-query, and not a choice
to stop. Such a follow-up is drawn again, up to ``resample`` times, each a new rollout at temperature 1.0 with
its own seed, as DSPy's BestOfN draws until its reward holds (here: the follow-up is not the question); only the
kept call enters the trace, so a bootstrapped demonstration never shows a restated question. A follow-up that
repeats an earlier one is not drawn again: there is nothing new to ask, and the loop ends. It also ends on
"none", on a question still restated after the draws, on an unreadable decomposition, or after
``max_iterations``; the prediction's ``stop`` says why, and ``redrawn`` counts the draws.
"""

import logging
import re
from types import MappingProxyType

import dspy
from dspy.utils.exceptions import AdapterParseError

from ragscale.programs.base import Method
from ragscale.programs.behaviour import answered, is_multi_hop, same_question
from ragscale.programs.retrieval import format_passage, merge_by_rank, most_relevant_last, references
from ragscale.signatures import AnswerSub, Decompose, Synthesize

logger = logging.getLogger(__name__)


NO_FOLLOW_UP = re.compile(r"(none|no|n/a|no (more |further )?follow[- ]?ups?( (are |is )?needed)?)", re.IGNORECASE)
"""What a decomposition step writes when no follow-up is needed."""


def follow_up_of(text: str) -> str:
    """The follow-up question a decomposition step wrote, without the "Q: ... A: ..." framing a small model copies
    from the follow-ups it was shown (a leading "Q:", and everything from an " A:" on)."""
    question = re.split(r"\s+A:\s", text.strip(), maxsplit=1)[0].strip()
    return re.sub(r"^Q:\s*", "", question)


def is_question(text: str) -> bool:
    """Whether a follow-up is written as a question: it ends in "?", or it is MuSiQue's "entity >> relation"."""
    text = str(text).strip()
    return text.endswith("?") or re.fullmatch(r"[^>]+\s>>\s[^>]+", text) is not None


def no_follow_up(text: str) -> bool:
    """Whether a decomposition step's text says that no follow-up is needed (empty, or "none" and the like)."""
    return not text.strip() or NO_FOLLOW_UP.fullmatch(text.strip(" .!\"'`*")) is not None


class IterDRAG(Method):
    """retrieve(question); repeat: decompose -> retrieve(follow-up) -> answer_sub; synthesize."""

    name = "iterdrag"
    iterates = True
    reaches_cap = "follow_ups"  # each iteration asks one follow-up or ends the loop
    record_fields = ("sub_questions", "intermediate_answers")  # the follow-ups asked, and their answers
    floors = (("questions_with_follow_up", 0.5),)  # below it, mostly DRAG with a step that declines
    floors_multi_hop = True
    # the 0.5B's own chains decompose too seldom and teach it to decline; the 1.5B's, two a predictor, decompose
    compile_defaults = MappingProxyType({"teacher": "qwen2.5-coder-1.5b", "shots": 2, "train_limit": 16})

    def __init__(self, retriever, k: int, max_iterations: int, resample: int = 3):
        super().__init__()
        if resample < 0:
            raise ValueError(f"resample must be >= 0, got {resample}")
        self.retriever, self.k, self.max_iterations, self.resample = retriever, k, max_iterations, resample
        self.decompose = dspy.Predict(Decompose)
        self.answer_sub = dspy.Predict(AnswerSub)
        self.synthesize = dspy.Predict(Synthesize)

    def max_documents(self) -> dict[str, int]:
        """The most documents each predictor can see in one call (for context-window checks)."""
        return {"answer_sub": self.k, "synthesize": self.k * (self.max_iterations + 1)}

    def max_list_items(self) -> int:
        """Follow-ups so far: at most ``max_iterations``."""
        return self.max_iterations

    @staticmethod
    def behaviour(question: str, prediction: dspy.Prediction) -> dict[str, float]:
        """Follow-ups asked, the question counted as having >= 1 (a 0-1 rate), follow-ups with an answer, and
        follow-ups written as a question (ending in "?", or in MuSiQue's "entity >> relation" form of a sub-question
        that labelled demonstrations show): a small model often writes a statement or an answer where the step asks
        for a question, and the loop takes it as the follow-up all the same."""
        asked = prediction.sub_questions
        return {
            "follow_ups": len(asked),
            "questions_with_follow_up": float(len(asked) > 0),
            "answered_follow_ups": answered(prediction.intermediate_answers),
            "follow_ups_as_questions": sum(is_question(q) for q in asked),
            "redrawn_follow_ups": prediction.get("redrawn", 0),
        }

    def demonstrates(self, example: dspy.Example, prediction: dspy.Prediction) -> bool:
        """A trace shows IterDRAG's step when a multi-hop question got at least one follow-up with its answer, and
        every follow-up is written as a question: the paper never uses a demonstration without sub-queries, and a
        demonstration whose "follow-up" is a statement or a guessed answer teaches the student to write that in
        place of a sub-query. A single-hop question may go without."""
        if not is_multi_hop(example):
            return True
        shown = self.behaviour(example.question, prediction)
        return shown["answered_follow_ups"] > 0 and shown["follow_ups_as_questions"] == shown["follow_ups"]

    def demo_set_lacks(self, predictor: str, demos, examples) -> str | None:
        """Decomposition demonstrations of multi-hop questions teach the loop only together: a set whose every
        follow-up is a first one never shows a follow-up asked after an answered one, and a "none" with nothing
        answered before it shows a multi-hop question answered with no sub-query at all, which a small reader with
        documents already in its context copies at once. So such a set needs a chain of two or more follow-ups,
        and "none" only after an answered follow-up."""
        hops = [demo for demo, example in zip(demos, examples, strict=True) if is_multi_hop(example)]
        if predictor != "decompose" or not hops:
            return None
        if any(no_follow_up(demo["follow_up"]) and not demo["follow_ups"] for demo in hops):
            return 'a "none" with no follow-up answered before it'
        if not any(len(demo["follow_ups"]) + (not no_follow_up(demo["follow_up"])) >= 2 for demo in hops):
            return "no chain of two or more follow-ups"
        return None

    def demo_queries(self, predictor: str, demo) -> list[str]:
        """An answer_sub demonstration shows its sub-question's documents; a synthesize one every document the loop
        gathered: the question's and each follow-up's, as ``forward`` merges them."""
        if predictor == "answer_sub":
            return [demo["sub_question"]]
        return [demo["question"], *(follow_up_of(f) for f in demo.get("follow_ups") or [])]

    def next_follow_up(self, question: str, follow_ups: list[str]) -> tuple[str, int]:
        """The follow-up the decomposition writes next, and how many times it was drawn again: greedily first,
        then, while it restates ``question``, a new rollout at temperature 1.0 seeded with its number, up to
        ``resample`` times. Only a kept call that does not restate the question is added to DSPy's trace; a draw
        that cannot be read ends the drawing (the greedy call's parse error is raised)."""
        lm, outer, written = dspy.settings.lm, dspy.settings.trace, ""
        for attempt in range(self.resample + 1):
            drawn = {"lm": lm.copy(rollout_id=attempt, temperature=1.0, seed=attempt)} if attempt else {}
            try:
                with dspy.context(trace=[], **drawn):
                    step = self.decompose(question=question, follow_ups=list(follow_ups))
                    calls = list(dspy.settings.trace)
            except AdapterParseError:
                if attempt == 0:
                    raise
                return written, attempt  # an unreadable draw: the restated follow-up stands, and ends the loop
            written = follow_up_of(step.follow_up or "")
            if same_question(written) != same_question(question):
                if outer is not None:
                    outer.extend(calls)
                return written, attempt
        return written, self.resample  # restated after every draw: no call of it is a demonstration

    def forward(self, question: str) -> dspy.Prediction:
        rankings = [self.retriever(question, self.k)]
        follow_ups, sub_questions, intermediate_answers, stop, redrawn = [], [], [], "max_iterations", 0
        for _ in range(self.max_iterations):
            asked = {same_question(q) for q in [question, *sub_questions]}
            try:
                sub_question, draws = self.next_follow_up(question, follow_ups)
            except AdapterParseError as error:  # no readable follow-up: answer with what was gathered
                logger.warning("IterDRAG: unreadable decomposition, answering now: %s", error)
                stop = "unreadable_follow_up"
                break
            redrawn += draws
            if no_follow_up(sub_question):
                stop = "no_follow_up"
                break
            if same_question(sub_question) in asked:
                stop = "repeated_follow_up"
                break
            rankings.append(self.retriever(sub_question, self.k))
            documents = [format_passage(p) for p in most_relevant_last(rankings[-1])]
            sub_answer = self.answer_sub(documents=documents, sub_question=sub_question).answer
            sub_questions.append(sub_question)
            intermediate_answers.append(sub_answer)
            follow_ups.append(f"Q: {sub_question} A: {sub_answer}")
        passages = most_relevant_last(merge_by_rank(rankings))
        documents = [format_passage(p) for p in passages]
        answer = self.synthesize(documents=documents, question=question, follow_ups=follow_ups).answer
        return dspy.Prediction(
            answer=answer,
            passages=references(passages),
            sub_questions=sub_questions,
            intermediate_answers=intermediate_answers,
            stop=stop,
            redrawn=redrawn,
        )
