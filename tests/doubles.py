"""Test doubles shared by several test modules (``pythonpath = ["tests"]`` makes them importable as ``doubles``)."""

import contextlib
import json
import threading

import dspy
import pytest
from dspy.lm15 import Message, Response, TextPart, Usage

from ragscale.experiments.cli import main
from ragscale.programs.lm import engine as engines
from ragscale.programs.lm.engine import choice_logprobs, enum_choices
from ragscale.programs.lm.meter import MeteredLM
from ragscale.programs.lm.prompt import render_chat, request_messages
from ragscale.programs.retrieval import Passage

BEST, SECOND, THIRD = (Passage(id=f"id-{n}", title=n, text=f"{n} text.") for n in ("Best", "Second", "Third"))


class FixedRetriever:
    """The same ranking (most relevant first) for every query, recording the queries; shared on copy."""

    def __init__(self, ranking=(BEST, SECOND, THIRD)):
        self.ranking, self.queries = list(ranking), []

    def __call__(self, query: str, k: int) -> list[Passage]:
        self.queries.append(query)
        return self.ranking[:k]

    def __deepcopy__(self, memo):
        return self


def examples(n: int = 5) -> list[dspy.Example]:
    """``n`` questions "Where is landmark i?" answered "City i"."""
    return [
        dspy.Example(id=str(i), question=f"Where is landmark {i}?", answers=[f"City {i}"]).with_inputs("question")
        for i in range(n)
    ]


def musique_example() -> dspy.Example:
    """A two-step question with its decomposition, as MuSiQue gives it ("#1" is step 1's answer)."""
    return dspy.Example(
        question="Where was the author of The Hobbit born?",
        answers=["Bloemfontein"],
        decomposition=[
            {"id": 1, "question": "Who wrote The Hobbit?", "answer": "Tolkien", "paragraph_support_idx": 0},
            {"id": 2, "question": "Where was #1 born?", "answer": "Bloemfontein", "paragraph_support_idx": 1},
        ],
    ).with_inputs("question")


# Made-up facts so that nothing is known to any model and BM25 finds the right paragraph by its rare words.
FACTS = [
    (
        "Zorblat River",
        "The Zorblat River flows from the Kestine hills into the Mirren Sea.",
        "Which sea does the Zorblat River flow into?",
        "Mirren Sea",
    ),
    (
        "Quillon Abbey",
        "Quillon Abbey was founded by the monk Aldric Venn in the year 1132.",
        "Who founded Quillon Abbey?",
        "Aldric Venn",
    ),
    (
        "Brastow Comet",
        "The Brastow Comet was first sighted by the astronomer Ilsa Marrow.",
        "Who first sighted the Brastow Comet?",
        "Ilsa Marrow",
    ),
    (
        "Pellucid Tower",
        "The Pellucid Tower stands 212 metres tall in the city of Ostravel.",
        "In which city is the Pellucid Tower?",
        "Ostravel",
    ),
    (
        "Garnock Treaty",
        "The Garnock Treaty ended the war between Vessia and Drummond in 1788.",
        "In which year was the Garnock Treaty signed?",
        "1788",
    ),
    (
        "Ommeline Opera",
        "Ommeline is an opera composed by Teodor Haskel about a lighthouse keeper.",
        "Who composed the opera Ommeline?",
        "Teodor Haskel",
    ),
    (
        "Fendrick Bridge",
        "The Fendrick Bridge crosses the Lune Gorge and is built of red granite.",
        "Which gorge does the Fendrick Bridge cross?",
        "Lune Gorge",
    ),
]
DISTRACTORS = [
    ("Harrow Marsh", "Harrow Marsh is a wetland known for its herons and reed beds."),
    ("Tindel Market", "Tindel Market sells spices, cloth and copper pots every Sunday."),
    ("Corvane Lighthouse", "Corvane Lighthouse was automated and its keeper retired."),
    ("Wexley Orchard", "Wexley Orchard grows pears and plums on a south-facing slope."),
    ("Saltmere Station", "Saltmere Station is a railway stop on the coastal line."),
    ("Ashby Quarry", "Ashby Quarry produced limestone for the cathedral."),
    ("Mossgrove Library", "Mossgrove Library holds maps of the northern islands."),
]


def record(i: int) -> dict:
    title, text, question, answer = FACTS[i]
    other_title, other_text = DISTRACTORS[i]
    return {
        "id": f"q{i}",
        "question": question,
        "answers": [answer],
        "paragraphs": [
            {"title": other_title, "text": other_text, "is_supporting": False},
            {"title": title, "text": text, "is_supporting": True},
        ],
        "supporting_titles": [title],
        "type": "bridge",
        "decomposition": None,
    }


class ScriptedChatEngine:
    """A DSPy engine answering in ChatAdapter format from a {question: answer} script; usage = words in, 2 out."""

    def __init__(self, script: dict[str, str]):
        self.script = script

    def complete(self, request):
        texts = [m.text or "" for m in request.messages]
        last = texts[-1]
        answer = next((a for q, a in self.script.items() if q in last), "no idea")
        output = f"[[ ## answer ## ]]\n{answer}\n\n[[ ## completed ## ]]"
        words = sum(len(t.split()) for t in texts)
        return Response(
            id=None,
            model="scripted",
            message=Message.assistant([TextPart(output)]),
            finish_reason="stop",
            usage=Usage(input_tokens=words, output_tokens=2, total_tokens=words + 2),
        )


def scripted_lm(script: dict[str, str]) -> MeteredLM:
    """A metered dspy.LM (as load_lm returns) whose engine follows a script instead of running weights."""
    return MeteredLM(
        "local/scripted", engine=ScriptedChatEngine(script), cache=False, num_retries=0, context_window=4096
    )


# q4, q5 answered right, q6 wrong.
SCRIPT = {FACTS[4][2]: "1788", FACTS[5][2]: "Teodor Haskel", FACTS[6][2]: "the Mirren Sea"}


class BiasedGrader:
    """An engine that scores a closed choice's options like a small model with a prior: "relevant" leads on every
    passage by 0.8 nats, and the passage moves the scores by less than that (+0.5 relevant for the Shakespeare
    passage, +0.3 irrelevant for the Eiffel one), so the uncalibrated choice is always "relevant"."""

    def __init__(self):
        self.prompts = []

    def complete(self, request):
        prompt = "\n".join(m.text or "" for m in request.messages)
        self.prompts.append(prompt)
        options = enum_choices(request.config.response_format)
        scores = {"relevant": -0.2, "ambiguous": -3.0, "irrelevant": -1.0}
        last = request.messages[-2].text  # the user turn (the last message is the pre-filled header)
        scores["relevant"] += 0.5 * ("Shakespeare" in last)
        scores["irrelevant"] += 0.3 * ("Eiffel" in last)
        values = [scores[o] for o in options]
        best = max(range(len(options)), key=values.__getitem__)
        return Response(
            id=None,
            model="biased",
            message=Message.assistant(json.dumps(options[best])),
            finish_reason="stop",
            usage=Usage(input_tokens=len(prompt.split()), output_tokens=1),
            logprobs=(choice_logprobs(options, values, best),),
        )


class AsyncOf:
    """The async counterpart of a synchronous test engine (DSPy's ``async_engine``)."""

    def __init__(self, engine):
        self.engine = engine

    async def complete(self, request):
        return self.engine.complete(request)


def biased_lm(engine: BiasedGrader) -> MeteredLM:
    """A metered dspy.LM over a ``BiasedGrader``, for sync and async calls."""
    return MeteredLM(
        "local/biased", engine=engine, async_engine=AsyncOf(engine), cache=False, num_retries=0, context_window=4096
    )


N_ITERATIONS_SCRIPTED = 2  # TokenizerEngine's decomposer asks this many follow-ups, then says none is needed


class TokenizerEngine:
    """Renders and counts like `TorchEngine` (SmolLM2's chat template and tokenizer), answers from a script.

    The script's reader answers a question with its gold answer when that answer is in the prompt's documents
    (``golds``: question -> answer), else "1990": more documents answer more questions, as with a real reader.
    """

    def __init__(self, tokenizer, golds: dict[str, str] | None = None):
        self.tokenizer, self._tok_lock, self.context_window = tokenizer, threading.Lock(), 8192
        self.golds, self.calls = golds or {}, 0

    def render_messages(self, messages):
        return render_chat(self.tokenizer, messages)

    def count_tokens(self, text: str) -> int:
        with self._tok_lock:
            return len(self.tokenizer(text, add_special_tokens=False).input_ids)

    def complete(self, request):
        self.calls += 1
        prompt = self.render_messages(request_messages(request))
        tail = prompt.rsplit("\n", 1)[-1]
        if tail.startswith("follow_up"):
            asked = prompt.rsplit("follow_ups", 1)[-1].count("Q: Which")  # this question's, not a demo's
            text = f" Which year is meant in step {asked + 1}?" if asked < N_ITERATIONS_SCRIPTED else " none"
        else:
            asked = prompt.rsplit("question: ", 1)[-1]
            seen = [gold for question, gold in self.golds.items() if asked.startswith(question) and gold in prompt]
            text = f" {seen[0]}" if seen else " 1990"
        return Response(
            id=None,
            model="scripted-smollm2",
            message=Message.assistant([TextPart(text)]),
            finish_reason="stop",
            usage=Usage(input_tokens=self.count_tokens(prompt), output_tokens=3, total_tokens=0),
        )


def tokenizer_lm(tokenizer, examples=None) -> MeteredLM:
    """A metered LM on a ``TokenizerEngine``; ``examples`` (train, dev) give the reader its gold answers, on the
    train questions too, so a bootstrapped trace can pass the metric."""
    golds = {ex.question: ex.answers[0] for split in examples for ex in split} if examples else None
    engine = TokenizerEngine(tokenizer, golds)
    return MeteredLM("local/scripted", engine=engine, cache=False, num_retries=0, context_window=8192)


def refused(argv: list[str], capsys) -> str:
    """Run ``ragscale argv``; assert that it exits with 2 and loaded no model; return what it wrote to stderr."""
    loaded = set(engines._SHARED)
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert set(engines._SHARED) == loaded, "a model was loaded before the input was refused"
    return capsys.readouterr().err


CLEAN_CHECKOUT = {"git_commit": "0" * 40, "git_dirty": "false"}


@contextlib.contextmanager
def clean_checkout(state: dict = CLEAN_CHECKOUT):
    """Runs made (and rows published) inside record the checkout ``state`` (by default a clean one), whatever the
    state of the checkout the tests run from: publishing refuses a dirty tree's runs (``runs.refuse_dirty``)."""
    from ragscale.experiments import provenance
    from ragscale.published import runs

    with pytest.MonkeyPatch.context() as patch:
        for module in (provenance, runs):
            patch.setattr(module, "git_state", lambda path=None: dict(state))
        yield
