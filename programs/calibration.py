"""Contextual calibration of a closed choice (Zhao et al. 2021, "Calibrate Before Use").

A small model choosing between options brings a prior that does not depend on the input: Qwen 0.5B grades every
passage "relevant", whatever it says, and demonstrations move that only a little. Calibration measures the
prior with the predictor's own prompt (its instructions and demonstrations) on content-free inputs ("N/A", "" and
"[MASK]" in every input field), averages the options' probabilities over them, and then picks, for a real input,
the option that maximises log p(option | input) - log p(option | content-free): the paper's diagonal correction,
which leaves a model without a prior unchanged.

``CalibratedPredict`` is a ``dspy.Predict`` for a signature with one closed-choice output (a ``Literal``, an
``Enum`` or a ``bool``). Until ``calibrate`` runs it predicts as ``Predict`` does; ``calibrate`` learns the prior
for the demonstrations it has then (run it again after they change), and the prior is saved with the program
(``dump_state``, key ``calibration``). It needs an LM that scores the options of a closed choice and returns the
scores (the local engine, through the field adapter: ``choice_logprobs``); another LM gets a ``ValueError`` that
names it, not an uncalibrated answer.

A content-free input is neutral only when no option fits it: for a relevance grade it is not, since an "N/A"
passage is irrelevant, so the prior leans to "irrelevant" and the correction pushes every grade toward
"relevant". Nothing calibrates by default; ``benchmarks/graders.py --calibrate`` measures it.
"""

from __future__ import annotations

import math
from typing import Any

import dspy

from ragscale.programs.lm.adapter import CHOICE_LOGPROBS
from ragscale.programs.lm.coerce import coerce_field, option_names

CONTENT_FREE = ("N/A", "", "[MASK]")
"""The content-free inputs of the paper, each put in every input field."""


class CalibratedPredict(dspy.Predict):
    """``Predict`` whose closed-choice output is corrected by the prior the prompt gives on content-free input."""

    def __init__(self, signature, **config):
        super().__init__(signature, **config)
        closed = [n for n, f in self.signature.output_fields.items() if option_names(f.annotation)]
        if len(closed) != 1 or len(self.signature.output_fields) != 1:
            raise ValueError(
                f"CalibratedPredict: {self.signature.__name__} must have exactly one output, a closed choice "
                f"(Literal, Enum or bool); its outputs are {list(self.signature.output_fields)}"
            )
        self.choice = closed[0]
        self.calibration: dict[str, float] | None = None

    def reset(self):
        super().reset()
        self.calibration = None

    def dump_state(self, json_mode=True):
        state = super().dump_state(json_mode=json_mode)
        return state if self.calibration is None else {**state, "calibration": self.calibration}

    def load_state(self, state: dict, **kwargs):
        self.calibration = state.get("calibration")
        return super().load_state(state, **kwargs)

    def calibrate(self, lm: Any = None, content_free: tuple[str, ...] = CONTENT_FREE) -> CalibratedPredict:
        """Learn the prior of the current prompt: the log of each option's probability averaged over the
        content-free inputs (with ``lm``, else the configured LM). Returns self."""
        self.calibration = None
        scores = []
        for text in content_free:
            inputs = {name: text for name in self.signature.input_fields}
            scores.append(self._required(self(**inputs, **_asking(lm, None)), lm))
        self.calibration = {o: math.log(sum(math.exp(s[o]) for s in scores) / len(scores)) for o in scores[0]}
        return self

    def forward(self, **kwargs):
        if self.calibration is not None:
            kwargs.update(_asking(kwargs.pop("lm", None), kwargs.pop("config", None)))
        return self._finish(super().forward(**kwargs), kwargs.get("lm"))

    async def aforward(self, **kwargs):
        if self.calibration is not None:
            kwargs.update(_asking(kwargs.pop("lm", None), kwargs.pop("config", None)))
        return self._finish(await super().aforward(**kwargs), kwargs.get("lm"))

    def probabilities(self, prediction: dspy.Prediction) -> dict[str, float] | None:
        """The options' probabilities behind one of this predictor's predictions, calibrated when it is; None when
        the prediction carries no option scores (the call did not ask for logprobs, or the LM gives none)."""
        found = getattr(prediction, "_option_logprobs", None)
        if not found:
            return None
        shifted = {o: v - (self.calibration or {}).get(o, 0.0) for o, v in found.items()}
        return {o: math.exp(v) for o, v in _log_softmax(shifted).items()}

    def _finish(self, prediction: dspy.Prediction, lm) -> dspy.Prediction:
        """Move the option scores off the prediction's fields (a demonstration made from it must not carry them)
        onto ``prediction._option_logprobs``, normalised over the options (``probabilities`` reads them); when
        calibrated, pick the option that beats the prior most."""
        found = (prediction.get(CHOICE_LOGPROBS) or {}).get(self.choice)
        if CHOICE_LOGPROBS in prediction:
            del prediction[CHOICE_LOGPROBS]
        if found:
            prediction._option_logprobs = _log_softmax(found)
        if self.calibration is None:
            return prediction
        scores = self._required(prediction, lm)
        best = max(scores, key=lambda option: scores[option] - self.calibration.get(option, 0.0))
        prediction[self.choice] = coerce_field(self.signature, self.choice, best)
        return prediction

    def _required(self, prediction: dspy.Prediction, lm) -> dict[str, float]:
        found = getattr(prediction, "_option_logprobs", None)
        if not found:
            used = lm or self.lm or dspy.settings.lm
            raise ValueError(
                f"CalibratedPredict({self.signature.__name__}): the LM {getattr(used, 'model', used)!r} returned no "
                f"scores for the options of {self.choice!r}; calibration needs the local engine with the field "
                "adapter (it scores a closed choice's options), or do not calibrate"
            )
        return found


def _asking(lm, config: dict | None) -> dict:
    """The keyword arguments of a call that asks for the options' scores (and runs on ``lm`` when given)."""
    return {"config": {**(config or {}), "logprobs": True}, **({"lm": lm} if lm is not None else {})}


def _log_softmax(scores: dict[str, float]) -> dict[str, float]:
    """Log-probabilities normalised over the options."""
    top = max(scores.values())
    total = top + math.log(sum(math.exp(v - top) for v in scores.values()))
    return {option: v - total for option, v in scores.items()}
