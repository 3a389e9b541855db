"""What a method's defining step did on one question, read from its prediction.

Every program has ``behaviour(question, prediction) -> {name: number}``: the step that makes the method what its
paper says it is (IterDRAG's follow-ups, Self-RAG's retrieval decision, CRAG's grades and corrective search, ...),
counted per question so that a run can report it beside EM and a compiled program can be checked for having kept
it. Rates (``is_rate``: names that end in ``_rate``, CRAG's ``graded_*`` shares and ``questions_with_*``) are 0-1
fractions; the others are counts. A method with no defining step beyond retrieve-then-answer (closed-book, RAG,
DRAG) returns ``{}``.
"""

from collections.abc import Iterable


def same_question(text: str) -> str:
    """A question's key for spotting repeats: lower case, no surrounding punctuation, single spaces."""
    return " ".join(str(text).lower().strip(" ?.").split())


def is_rate(name: str) -> bool:
    """Whether the behaviour value ``name`` is a 0-1 fraction (shown as a percentage) rather than a count."""
    return name.endswith("_rate") or name.startswith(("graded_", "questions_with_"))


def sub_question_counts(question: str, sub_questions: Iterable[str]) -> dict[str, float]:
    """A decomposition's sub-questions, and how many distinct ones differ from the question itself."""
    asked = list(sub_questions)
    own = [q for q in asked if same_question(q) != same_question(question)]
    return {"sub_questions": len(asked), "distinct_sub_questions": distinct(own)}


def distinct(texts: Iterable[str]) -> int:
    """How many different questions or queries (``same_question`` keys) ``texts`` holds, empty ones left out."""
    return len({same_question(text) for text in texts} - {""})


def is_multi_hop(example) -> bool:
    """Whether the data marks ``example`` multi-hop: any ``type`` but NQ's "single-hop ..." (HotpotQA bridge and
    comparison, MuSiQue 2hop..4hop3, 2Wiki's four, Bamboogle's 2-hop); an example without a type is not."""
    kind = str(example.get("type") or "")
    return bool(kind) and not kind.startswith("single-hop")


def answered(texts: Iterable[str]) -> int:
    """How many of ``texts`` are non-empty answers."""
    return sum(bool(str(text).strip()) for text in texts)
