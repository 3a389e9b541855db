"""How an answer is scored: SQuAD-normalised exact match, token F1 and accuracy, and retrieval recall.

The answer metrics are those of Yue et al. 2024 (arXiv:2410.04343): EM and F1 as in SQuAD (Rajpurkar et al. 2016, the
official evaluation script's normalisation: lower case, no punctuation, no articles a/an/the, single spaces), F1 with
HotpotQA's official rule for its closed answers (``hotpot_evaluate_v1.py``: a prediction or a gold answer that is "yes",
"no" or "noanswer" scores 0 unless the two are equal, where token overlap would give "yes it is" partial credit against
"yes"), and Acc, whether a gold answer is contained in the prediction. Each is the maximum over the gold aliases.
``em_metric``, ``f1_metric`` and ``acc_metric`` wrap them as DSPy metrics ``(example, pred, trace)``.
"""

import re
import string
from collections import Counter
from collections.abc import Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
CLOSED_ANSWERS = ("yes", "no", "noanswer")
"""Normalised answers that HotpotQA's official F1 scores all or nothing."""


def normalize_answer(text: str | None) -> str:
    """SQuAD normalisation: lower case, punctuation and articles removed, whitespace collapsed."""
    text = (text or "").lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(pred: str | None, answers: Sequence[str]) -> float:
    """1.0 when the normalised prediction equals a normalised gold alias, else 0.0."""
    guess = normalize_answer(pred)
    return float(any(guess == normalize_answer(gold) for gold in answers))


def _f1(guess: str, gold: str) -> float:
    """HotpotQA's official F1 of two normalised answers."""
    if guess != gold and (guess in CLOSED_ANSWERS or gold in CLOSED_ANSWERS):
        return 0.0
    guess_tokens, gold_tokens = guess.split(), gold.split()
    common = sum((Counter(guess_tokens) & Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(guess_tokens), common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1(pred: str | None, answers: Sequence[str]) -> float:
    """Token F1 between the normalised prediction and the best-matching gold alias (HotpotQA's official rule: see
    the module docstring)."""
    guess = normalize_answer(pred)
    return max((_f1(guess, normalize_answer(gold)) for gold in answers), default=0.0)


def accuracy(pred: str | None, answers: Sequence[str]) -> float:
    """1.0 when a normalised, non-empty gold alias occurs in the normalised prediction as whole words.

    Whole words: gold "no" is not found in "not known", gold "1902" is found in "in 1902".
    """
    guess = f" {normalize_answer(pred)} "
    return float(any(gold and f" {gold} " in guess for gold in map(normalize_answer, answers)))


def retrieval_recall(passage_titles: Sequence[str], supporting_titles: Sequence[str]) -> float | None:
    """The fraction of supporting titles among the retrieved passages' titles; None when there are none to find
    (Bamboogle has no supporting passages), so that averages skip the question."""
    wanted = set(supporting_titles)
    if not wanted:
        return None
    return len(wanted & set(passage_titles)) / len(wanted)


def gold_answers(example) -> list[str]:
    """The gold aliases of a dataset example: ``answers`` (the shared schema), else ``[answer]``."""
    answers = example.get("answers") if hasattr(example, "get") else None
    return list(answers) if answers else [example.answer]


def em_metric(example, pred, trace=None) -> float:
    """DSPy metric: exact match of ``pred.answer`` against the example's aliases."""
    return exact_match(pred.answer, gold_answers(example))


def f1_metric(example, pred, trace=None) -> float:
    """DSPy metric: token F1 of ``pred.answer`` against the example's aliases."""
    return f1(pred.answer, gold_answers(example))


def acc_metric(example, pred, trace=None) -> float:
    """DSPy metric: a gold alias contained in ``pred.answer``."""
    return accuracy(pred.answer, gold_answers(example))


METRICS = {"em": em_metric, "f1": f1_metric, "acc": acc_metric}
