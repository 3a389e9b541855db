"""A DSPy adapter that tiny local models can follow: one output field at a time, typed coercion, loud failures.

One concept in one file: the calls the adapter makes, one output field each; the messages they carry are written by
``turns.py`` (``FieldTurns``, which the adapter extends), and the replies are read back into typed values by
``coerce.py``.

DSPy's `ChatAdapter` asks the model to write every output field between `[[ ## name ## ]]` markers in one reply.
A 135M model cannot: it answers with code fences or echoes a marker, and ChatAdapter then silently retries
through `JSONAdapter`, whose repair step turns junk into "parsed" strings. `FieldAdapter` instead writes the
prompt as a plain conversation and generates ONE output field per LM call:

    system     the signature's instructions, then one line per input and output field
    user       one few-shot demo's inputs          (demos: rendered exactly like the real turn)
    assistant  "answer: Paris"
    user       the real inputs                     ("question: ...", lists as "[1] ..." lines)
    assistant  "answer:"                           <- pre-filled header; the model continues it

After a field is generated, its text and the next field's header are appended to the assistant turn and the LM
is called again, so the model always sees exactly the format of the demos. Each call stops at a newline (short
fields) or at a blank line / the next header (long fields and lists), with a per-field token budget.

Continuation protocol (local engine, `ragscale.programs.lm`): the LAST message is
`{"role": "assistant", "content": "<fields so far + next header>"}`; the engine renders the earlier messages with
the generation prompt, appends that prefix verbatim and continues it without closing the turn.

Server LMs (a LiteLLM model string such as `openai/<model>` with an `api_base`) may not continue a trailing
assistant message. With `continuation="auto"` (the default) they get the portable form instead: the fields
generated so far are shown in the user turn and the user turn ends with "Reply with the <field> only."; the
reply is parsed the same way. `continuation="prefill"` forces the trailing assistant message (for a server,
it also sends vLLM's `continue_final_message=True, add_generation_prompt=False` in `extra_body`);
`continuation="user"` forces the portable form for every LM.

Closed choices (`Literal[...]`, an `Enum`, `bool`) are constrained, not generated: the call carries
`response_format` = a JSON schema of one string enum (the options; "yes"/"no" for a bool). The local engine scores
each option's log-likelihood after the pre-filled header and replies with the most likely one, so a closed choice
always parses even from a 135M model; an OpenAI-compatible server that supports structured outputs (vLLM, SGLang,
Ollama) constrains its decoding to the same schema. `constrain_choices=False` generates them as free text instead.
When a call asks for `logprobs` and the LM scored the options (the local engine does), the prediction also carries
`choice_logprobs`: `{field: {option: log-likelihood}}`, which a calibrated choice (`ragscale.programs.calibration`)
reads.

Every output is coerced to the field's type (``coerce.py``); a value that cannot be, an empty or pure-template-junk
string included, gets one reworded request and then raises `FieldParseError`, naming the signature, the field and
the raw text. There is no fallback to another adapter: an evaluation records the question as failed.
``requests`` lists the messages of every call one predictor call makes, which is what a token estimate counts.
"""

from __future__ import annotations

import logging
from collections.abc import Generator
from typing import Any, Literal

import dspy
from dspy.adapters.types.reasoning import Reasoning
from dspy.clients._deprecation import adapter_message_call
from dspy.signatures.signature import Signature

from ragscale.programs.lm.coerce import (
    END_MARKERS,
    FieldParseError,
    choices_of,
    coerce_field,
    description,
    is_list,
    option_names,
    unwrap_optional,
)
from ragscale.programs.lm.turns import FieldTurns, separator

__all__ = ["FieldAdapter"]

logger = logging.getLogger(__name__)

CHOICE_LOGPROBS = "choice_logprobs"
"""The prediction key of a closed choice's option scores, when the call asked for logprobs and the LM gave them."""

LONG_TEXT_HINTS: tuple[str, ...] = (
    "reasoning",
    "rationale",
    "passage",
    "paragraph",
    "sentences",
    "explanation",
    "summary",
    "instruction",
    "proposed",
    "description",
)


class FieldAdapter(FieldTurns, dspy.Adapter):
    """Generate and coerce one output field at a time, with the field's header pre-filled in the assistant turn.

    Args:
        continuation: "auto" (pre-fill for an LM with a custom engine, user-turn request for a LiteLLM server
            model), "prefill" or "user"; see the module docstring.
        constrain_choices: send closed-choice fields (Literal, Enum, bool) as a JSON-schema enum
            `response_format`, which the local engine answers by scoring the options (see the module docstring).
        short_max_tokens: budget for a one-line `str` field (answers, questions).
        long_max_tokens: budget for a long text or list field (reasoning, passages, lists); capped by the
            call's own `max_tokens` when one is set.
        callbacks: DSPy adapter callbacks.
    """

    def __init__(
        self,
        continuation: Literal["auto", "prefill", "user"] = "auto",
        *,
        constrain_choices: bool = True,
        short_max_tokens: int = 48,
        long_max_tokens: int = 256,
        callbacks: list | None = None,
    ) -> None:
        if continuation not in ("auto", "prefill", "user"):
            raise ValueError(f"continuation={continuation!r}; valid: 'auto', 'prefill', 'user'")
        super().__init__(callbacks=callbacks)
        self.continuation = continuation
        self.constrain_choices = constrain_choices
        self.short_max_tokens = short_max_tokens
        self.long_max_tokens = long_max_tokens

    # ----------------------------------------------------------------------------------------------- the call

    def __call__(
        self,
        lm: dspy.BaseLM,
        lm_kwargs: dict[str, Any],
        signature: type[Signature],
        demos: list[dict[str, Any]],
        inputs: dict[str, Any],
    ) -> list[dict[str, Any]]:
        results = []
        for plan in self._plans(lm, lm_kwargs, signature, demos, inputs):
            scores: dict[str, dict[str, float]] = {}
            try:
                messages, kwargs = next(plan)
                while True:
                    with adapter_message_call(lm, messages):
                        output = lm(messages=messages, **kwargs)
                    scores.update(_choice_scores(kwargs, output))
                    messages, kwargs = plan.send(_text_of(output))
            except StopIteration as done:
                results.append({**done.value, CHOICE_LOGPROBS: scores} if scores else done.value)
        return results

    async def acall(
        self,
        lm: dspy.BaseLM,
        lm_kwargs: dict[str, Any],
        signature: type[Signature],
        demos: list[dict[str, Any]],
        inputs: dict[str, Any],
    ) -> list[dict[str, Any]]:
        results = []
        for plan in self._plans(lm, lm_kwargs, signature, demos, inputs):
            scores: dict[str, dict[str, float]] = {}
            try:
                messages, kwargs = next(plan)
                while True:
                    with adapter_message_call(lm, messages):
                        output = await lm.acall(messages=messages, **kwargs)
                    scores.update(_choice_scores(kwargs, output))
                    messages, kwargs = plan.send(_text_of(output))
            except StopIteration as done:
                results.append({**done.value, CHOICE_LOGPROBS: scores} if scores else done.value)
        return results

    def requests(
        self,
        lm: dspy.BaseLM,
        signature: type[Signature],
        demos: list[dict[str, Any]],
        inputs: dict[str, Any],
        outputs: dict[str, Any],
    ) -> list[list[dict[str, Any]]]:
        """The messages of each LM call that one predictor call makes when the model replies ``outputs``.

        Each output field's reply is its value as this adapter renders it, so ``outputs`` must be values of the
        fields' types that read back as they are (a value that would be asked again raises ``ValueError``). This is
        what a token estimate counts: the calls of one predictor call, without running the model.
        """
        plan = self._plan(lm, {}, signature, self.format(signature, demos, inputs))
        calls: list[list[dict[str, Any]]] = []
        try:
            messages, _ = next(plan)
            for name, field in signature.output_fields.items():
                calls.append(messages)
                messages, _ = plan.send(self.format_field_value(field, outputs[name]))
        except StopIteration:
            return calls
        raise ValueError(f"{signature.__name__}: the adapter would ask again for a value of {outputs!r}")

    def _plans(self, lm, lm_kwargs, signature, demos, inputs) -> list[Generator]:
        """One field-by-field generation plan per requested completion (`n`)."""
        lm_kwargs = dict(lm_kwargs)
        n = int(lm_kwargs.pop("n", None) or lm_kwargs.pop("num_generations", None) or 1)
        base = self.format(signature, demos, inputs)
        plans = []
        for i in range(n):
            kwargs = dict(lm_kwargs)
            if n > 1:
                kwargs["rollout_id"] = (kwargs.get("rollout_id") or 0) * n + i
            plans.append(self._plan(lm, kwargs, signature, base))
        return plans

    def _plan(self, lm, kwargs, signature, base) -> Generator[tuple[list, dict], str, dict[str, Any]]:
        """Yield (messages, lm kwargs) per LM call, receive the generated text, return the typed outputs."""
        outputs: dict[str, Any] = {}
        prefix = ""
        for name, field in signature.output_fields.items():
            raw = yield self._field_request(lm, kwargs, signature, base, prefix, name)
            if not raw.strip() and not self.is_long(name, field):
                # The model opened the value with a newline and hit the one-line stop: let it write one line.
                raw = yield self._field_request(lm, kwargs, signature, base, prefix, name, multiline=True)
                raw = next((line for line in raw.splitlines() if line.strip()), "")
            try:
                value = coerce_field(signature, name, raw)
            except FieldParseError:
                # One more try with the request reworded: a closed choice names its options in the pre-filled
                # header; a text field is asked for without its description (which small models copy).
                hinted = self.hinted_header(name, field)
                plain = None if hinted else f"Reply with {name}."
                raw = yield self._field_request(lm, kwargs, signature, base, prefix, name, header=hinted, ask=plain)
                value = coerce_field(signature, name, raw)
            outputs[name] = value
            rendered = self.format_field_value(field, value)
            prefix += f"{self.header(name, field)}{separator(rendered)}{rendered}\n"
        return outputs

    def _field_request(
        self,
        lm,
        kwargs,
        signature,
        base,
        prefix: str,
        name: str,
        multiline: bool = False,
        header: str | None = None,
        ask: str | None = None,
    ):
        field = signature.output_fields[name]
        names = list(signature.output_fields)
        later = names[names.index(name) + 1 :]
        long = self.is_long(name, field)
        stops = ["\n\n"] if long or multiline else ["\n"]
        stops += [f"\n{self.header(n, signature.output_fields[n])}" for n in later]
        stops += [m for m in END_MARKERS if m not in stops]
        budget = self.long_max_tokens if long else self.max_tokens_for(field)
        if kwargs.get("max_tokens"):
            budget = min(budget, int(kwargs["max_tokens"]))
        call_kwargs = {k: v for k, v in kwargs.items() if k not in ("max_tokens", "max_completion_tokens", "stop")}
        extra_stops = kwargs.get("stop") or []
        call_kwargs["stop"] = [*stops, *([extra_stops] if isinstance(extra_stops, str) else extra_stops)]
        call_kwargs["max_tokens"] = budget
        options = self.closed_choices(field)
        if options and self.constrain_choices:
            schema = {"type": "string", "enum": options}
            call_kwargs["response_format"] = {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}
        messages = [dict(m) for m in base]
        prefill = self._prefill(lm)
        first = next(iter(signature.output_fields))
        if name != first or ask or (prefix and not prefill):
            asked = self.output_request(signature, first)
            content = messages[-1]["content"]
            if content.endswith(asked):
                done = "" if prefill or not prefix else f"So far:\n{prefix.rstrip()}\n\n"
                request = ask or self.output_request(signature, name)
                messages[-1]["content"] = f"{content[: -len(asked)]}{done}{request}"
        header = header or self.header(name, field)
        if prefill:
            messages.append({"role": "assistant", "content": f"{prefix}{header}"})
            if _is_server(lm):
                extra = dict(call_kwargs.get("extra_body") or {})
                extra.setdefault("continue_final_message", True)
                extra.setdefault("add_generation_prompt", False)
                call_kwargs["extra_body"] = extra
        return messages, call_kwargs

    def _prefill(self, lm) -> bool:
        if self.continuation == "auto":
            return not _is_server(lm)
        return self.continuation == "prefill"

    def closed_choices(self, field) -> list[str] | None:
        """The options of a closed-choice output field (Literal, Enum; "yes"/"no" for bool), else None."""
        return option_names(unwrap_optional(field.annotation))

    def is_long(self, name: str, field) -> bool:
        """Whether a field may run over several lines: lists, reasoning, passages (by name or description)."""
        annotation = field.annotation
        if annotation is Reasoning or is_list(annotation):
            return True
        if annotation is not str:
            return False
        words = f"{name} {description(field)}".lower()
        return any(hint in words for hint in LONG_TEXT_HINTS)

    def max_tokens_for(self, field) -> int:
        annotation = field.annotation
        if annotation is bool or choices_of(annotation):
            return 8
        if annotation in (int, float):
            return 12
        return self.short_max_tokens


def _is_server(lm) -> bool:
    """True for a LiteLLM-backed model (an OpenAI-compatible server), False for an LM with a custom engine."""
    spec = getattr(lm, "_engine_spec", None)
    if spec is None:
        return bool(getattr(lm, "kwargs", {}).get("api_base")) or "/" in str(getattr(lm, "model", ""))
    return isinstance(spec, str)


def _choice_scores(kwargs: dict[str, Any], outputs) -> dict[str, dict[str, float]]:
    """``{field: {option: log-likelihood}}`` of a closed-choice call whose reply carries its options' scores (the
    local engine's, when the call asked for ``logprobs``), else ``{}``."""
    schema = (kwargs.get("response_format") or {}).get("json_schema") or {}
    first = outputs[0] if outputs else None
    logprobs = first.get("logprobs") if isinstance(first, dict) else None
    content = (logprobs or {}).get("content") or []
    if not schema.get("name") or not content or not content[0].get("top_logprobs"):
        return {}
    scores = {top["token"]: float(top["logprob"]) for top in content[0]["top_logprobs"]}
    if set(scores) != set((schema.get("schema") or {}).get("enum") or ()):  # a server's token alternatives
        return {}
    return {schema["name"]: scores}


def _text_of(outputs) -> str:
    if not outputs:
        return ""
    first = outputs[0]
    if isinstance(first, dict):
        return first.get("text") or ""
    return str(first)
