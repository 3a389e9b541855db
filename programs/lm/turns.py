"""The conversation ``FieldAdapter`` writes: a system turn, demonstration turns and the user turn, and in them each
field's header and rendered value.

One concept in one file: how a signature's fields are written in a prompt (and a whole reply written that way read
back); the calls that carry them are ``adapter.py``'s, a reply's text read into its type ``coerce.py``'s.

    system     the signature's instructions
    user       one few-shot demo's inputs          (demos: rendered exactly like the real turn)
    assistant  "answer: Paris"
    user       the real inputs                     ("question: ...", lists as "[1] ..." lines), then what to reply
    assistant  "answer:"                           <- pre-filled header (the adapter's); the model continues it
"""

from __future__ import annotations

import enum
import re
import textwrap
from typing import Any

from dspy.adapters.types.reasoning import Reasoning
from dspy.adapters.utils import format_field_value
from dspy.signatures.signature import Signature

from ragscale.programs.lm.coerce import FieldParseError, choices_of, coerce_field, description, is_list, unwrap_optional

__all__ = ["FieldTurns", "separator"]


class FieldTurns:
    """The messages of ``FieldAdapter`` (which extends it and ``dspy.Adapter``): DSPy's ``format``, ``format_*``
    and ``parse`` methods, written for one field at a time. Not a ``dspy.Adapter`` itself, so DSPy wraps ``format``
    and ``parse`` with its callbacks once, in the adapter."""

    def header(self, name: str, field=None) -> str:
        """The header that opens a field's value: the field name and a colon; "(yes or no)" for a bool output.

        The yes/no hint in the pre-filled header is what makes a small model answer a bool field instead of
        continuing the inputs; a Literal's options are not named there, as naming them made small models worse.
        """
        if field is not None and unwrap_optional(field.annotation) is bool:
            return f"{name} (yes or no):"
        return f"{name}:"

    def hinted_header(self, name: str, field) -> str | None:
        """The header of the one retry a closed-choice field gets when its first reply names no option."""
        annotation = unwrap_optional(field.annotation)
        choices = choices_of(annotation)
        if choices:
            return f"{name} ({_or(choices)}):"
        if annotation is bool:
            return f"{name} (answer yes or no):"
        return None

    def format(
        self, signature: type[Signature], demos: list[dict[str, Any]], inputs: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """System message, demo turns and the user turn; the caller adds the pre-filled assistant header."""
        messages = [{"role": "system", "content": self.format_system_message(signature)}]
        messages.extend(self.format_demos(signature, demos))
        messages.append({"role": "user", "content": self.format_user_message_content(signature, inputs)})
        return messages

    def format_system_message(self, signature: type[Signature]) -> str:
        return self.format_task_description(signature)

    def format_task_description(self, signature: type[Signature]) -> str:
        return textwrap.dedent(signature.instructions).strip()

    def format_field_description(self, signature: type[Signature]) -> str:
        lines = ["You get:"]
        lines += [f"- {self.header(k)} {_describe(k, v)}" for k, v in signature.input_fields.items()]
        lines.append("You reply with:")
        lines += [f"- {self.header(k)} {_describe(k, v, output=True)}" for k, v in signature.output_fields.items()]
        return "\n".join(lines)

    def format_field_structure(self, signature: type[Signature]) -> str:
        return "\n".join(f"{self.header(k, v)} ..." for k, v in signature.output_fields.items())

    def format_user_message_content(
        self,
        signature: type[Signature],
        inputs: dict[str, Any],
        prefix: str = "",
        suffix: str = "",
        main_request: bool = False,
    ) -> str:
        parts = [prefix] if prefix else []
        # Lists (documents, earlier steps) first, short fields such as the question last, next to the reply.
        ordered = sorted(signature.input_fields.items(), key=lambda item: not is_list(item[1].annotation))
        for name, field in ordered:
            if name in inputs:
                value = self.format_field_value(field, inputs[name])
                parts.append(f"{self.header(name)}{separator(value)}{value}")
        parts.append(self.output_request(signature))
        if suffix:
            parts.append(suffix)
        return "\n\n".join(parts)

    def output_request(self, signature: type[Signature], name: str | None = None) -> str:
        """The closing line of a user turn: what to write for one output field (the first by default).

        Each LM call asks for the one field it generates; asking for all of them at once made SmolLM2 copy the
        later fields' descriptions as values.
        """
        name = name or next(iter(signature.output_fields))
        return f"Reply with {_describe(name, signature.output_fields[name], output=True)}."

    def format_assistant_message_content(
        self,
        signature: type[Signature],
        outputs: dict[str, Any],
        missing_field_message: str | None = None,
    ) -> str:
        lines = []
        for name, field in signature.output_fields.items():
            if outputs.get(name) is None:
                break  # a demo's fields are shown in generation order; stop at the first one it lacks
            value = self.format_field_value(field, outputs[name])
            lines.append(f"{self.header(name, field)}{separator(value)}{value}")
        return "\n".join(lines)

    def format_demos(self, signature: type[Signature], demos: list[dict[str, Any]]) -> list[dict[str, Any]]:
        messages = []
        for demo in demos:
            if not any(k in demo for k in signature.input_fields):
                continue
            answer = self.format_assistant_message_content(signature, demo)
            if not answer:
                continue
            messages.append({"role": "user", "content": self.format_user_message_content(signature, demo)})
            messages.append({"role": "assistant", "content": answer})
        return messages

    def format_field_value(self, field, value: Any) -> str:
        """Render a value: lists as numbered lines "[1] ...", bools as yes/no, the rest as text."""
        if isinstance(value, Reasoning):
            value = value.content
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, enum.Enum):
            return str(value.value)
        if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float)) for v in value):
            if not value:
                return "(none)"
            return "\n".join(f"[{i}] {_one_line(str(v))}" for i, v in enumerate(value, 1))
        if isinstance(value, str):
            return value.strip()
        return str(format_field_value(field_info=field, value=value))

    def parse(self, signature: type[Signature], completion: str) -> dict[str, Any]:
        """Parse a whole assistant turn "name: value" per field (as the demos show) into typed values."""
        names = list(signature.output_fields)
        headers = {self.header(n, f): n for n, f in signature.output_fields.items()}
        pattern = re.compile(r"^(" + "|".join(re.escape(h) for h in headers) + r")", re.MULTILINE)
        pieces = pattern.split(completion)
        found: dict[str, str] = {}
        for i in range(1, len(pieces) - 1, 2):
            found.setdefault(headers[pieces[i]], pieces[i + 1])
        outputs = {}
        for name in names:
            if name not in found:
                raise FieldParseError(signature, name, completion, "the field's header is missing")
            outputs[name] = coerce_field(signature, name, found[name])
        return outputs


def _describe(name: str, field, output: bool = False) -> str:
    desc = description(field)
    if desc.startswith("${"):  # DSPy's placeholder description, e.g. ChainOfThought's "${reasoning}"
        desc = ""
    annotation = unwrap_optional(field.annotation)
    kind = ""
    if output:
        choices = choices_of(annotation)
        if annotation is bool:
            kind = "yes or no"
        elif choices:
            kind = _or(choices)
        elif is_list(annotation):
            kind = "a list, one item per line"
        elif annotation in (int, float):
            kind = "a number"
    elif is_list(annotation):
        kind = "numbered lines"
    label = name.replace("_", " ")
    if output:
        return name + (f" ({kind})" if kind else "") + (f": {desc}" if desc else "")
    return "; ".join(x for x in (desc or label, kind) if x)


def _or(choices) -> str:
    words = [str(c) for c in choices]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def separator(value: str) -> str:
    """Separator between a header and its value: a newline before numbered lines, else a space."""
    return "\n" if "\n" in value or value.startswith("[1] ") else " "


def _one_line(text: str) -> str:
    return " ".join(text.split())
