"""What every signature that writes the final answer asks of it, written once: the short answer only.

A signature's instructions are its docstring, composed here as ``__doc__ = short_answer(task, width=...)``. The line
breaks are part of the prompt the model reads, of a compiled program's state and of a run's key
(``experiments/identity.py`` hashes ``dump_state()``), so each signature keeps the width its instruction had when
published results were made: the same bytes as the docstring it replaces.
"""

import textwrap

SHORT_ANSWER = "Reply with the short answer only"
"""The instruction itself."""

ANSWER_FORMS = "a name, a date, a number, a short phrase, or yes/no. Do not explain."
"""The forms a short answer takes, spelled out where the answer is the question's own."""


def short_answer(task: str, *, width: int, forms: bool = True) -> str:
    """``task``, then ``SHORT_ANSWER`` (followed by ``ANSWER_FORMS`` unless ``forms`` is False), wrapped at ``width``
    characters between words."""
    rule = f"{SHORT_ANSWER}: {ANSWER_FORMS}" if forms else f"{SHORT_ANSWER}."
    return textwrap.fill(f"{task} {rule}", width=width, break_on_hyphens=False, break_long_words=False)
