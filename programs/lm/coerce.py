"""Turning the text a model wrote for one output field into the field's type, or a loud ``FieldParseError``.

Every output is coerced to its field's annotation: ``str`` (stripped, cut at end markers and stray headers;
a copy of the prompt's template is refused), ``bool`` (first word yes/no/true/false), ``Literal[...]`` and
``Enum`` (exact, prefix, contained, then closest by difflib), ``list[str]`` (a JSON list, lines, bullets or
numbering; an item holding several questions is one item per question), ``int``/``float`` (the first number),
anything else through pydantic. A value that cannot be coerced -- an empty or pure-template-junk string included
-- raises ``FieldParseError`` naming the signature, the field and the raw text. ``choices_of`` is the one
reading of a closed choice's options.
"""

from __future__ import annotations

import difflib
import enum
import json
import re
import types
from typing import Any, Literal, Union, get_args, get_origin

import pydantic
from dspy.adapters.types.reasoning import Reasoning
from dspy.signatures.signature import Signature
from dspy.utils.exceptions import AdapterParseError

#: Text small models emit to close a reply or open a new one; a value is cut before any of these.
END_MARKERS: tuple[str, ...] = (
    "[[",
    "```",
    "<|im_end|>",
    "<|im_start|>",
    "<|endoftext|>",
    "</s>",
    "<|eot_id|>",
    "<end_of_turn>",
)

#: Field names (or words in their description) that mark a free-text field that may run for several sentences.

_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")
_LIST_ITEM = re.compile(r"^\s*(?:\[\d+\]|\(?\d+[.)]|[-*\u2022+])\s+")
_AFTER_QUESTION = re.compile(r"(?<=\?)\s+(?=\S)")  # where one question ends and the next begins
_WORD = re.compile(r"[a-z]+")
_TRUE_WORDS = frozenset({"yes", "true", "y", "correct", "1"})
_FALSE_WORDS = frozenset({"no", "false", "n", "incorrect", "none", "0"})


class FieldParseError(AdapterParseError):
    """An output field whose generated text could not be coerced to the field's type.

    Attributes:
        signature_name: the signature's class name.
        field: the output field's name.
        raw: the text the model generated for that field (after the pre-filled header).
        reason: why it was rejected.
    """

    def __init__(self, signature: type[Signature], field: str, raw: str, reason: str) -> None:
        self.signature_name = getattr(signature, "__name__", str(signature))
        self.field = field
        self.raw = raw
        self.reason = reason
        super().__init__(
            adapter_name="FieldAdapter",
            signature=signature,
            lm_response=raw,
            message=f"{self.signature_name}.{field}: {reason}; generated text: {raw!r}",
        )


def coerce_field(signature: type[Signature], name: str, raw: str) -> Any:
    """Coerce the text generated for output field `name` to its annotated type, or raise FieldParseError."""
    field = signature.output_fields[name]
    annotation = unwrap_optional(field.annotation)
    headers = [*signature.input_fields, *signature.output_fields]
    text = clean_text(raw, headers)
    try:
        if annotation is Reasoning:
            return Reasoning(content=_require_text(text, raw, optional=False))
        if annotation is str:
            optional = _may_be_empty(field)
            if _norm(text).strip("()") in _NOTHING:  # "none", "(none)", "N/A", ...: the prompt's empty list copied
                if optional:
                    return ""
                if _offers_none(field):
                    return "none"
            junk = _template_junk(signature, text)
            if junk:
                raise ValueError(f"copied the prompt's template ({junk!r}) instead of a value")
            return _require_text(text, raw, optional=optional)
        if annotation is bool:
            return coerce_bool(text)
        choices = choices_of(annotation)
        if choices:
            value = coerce_choice(text, [str(c) for c in choices])
            return next(m for m in annotation if str(m.value) == value) if is_enum(annotation) else value
        if annotation is int:
            return round(coerce_number(text))
        if annotation is float:
            return coerce_number(text)
        if is_list(annotation):
            item_type = (get_args(annotation) or (str,))[0]
            items = coerce_list(raw, headers)
            if item_type in (int, float):
                return [item_type(coerce_number(i)) for i in items]
            return items
        return _coerce_json(text, annotation)
    except ValueError as e:
        raise FieldParseError(signature, name, raw, str(e)) from None


def clean_text(raw: str, headers: list[str] | tuple[str, ...] = ()) -> str:
    """Strip a value, cut it at end markers and at a line that opens another field, drop a repeated header."""
    text = raw or ""
    for marker in END_MARKERS:
        if marker in text:
            text = text[: text.index(marker)]
    if headers:
        names = "|".join(re.escape(h) for h in headers)
        stray = re.search(rf"\n\s*(?:{names})\s*:", text)
        if stray:
            text = text[: stray.start()]
        text = re.sub(rf"^\s*(?:{names})\s*(?:\([^)\n]*\))?\s*:", "", text)
    text = text.strip()
    text = re.sub(r"^\*\*(.*)\*\*$", r"\1", text).strip()
    text = re.sub(r"^\[\d+\]\s+", "", text)  # a numbered-list marker copied from the inputs' rendering
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'`":
        text = text[1:-1].strip()
    return text


def coerce_bool(text: str) -> bool:
    """yes/no/true/false by the first word."""
    words = _WORD.findall(text.lower())
    if words and words[0] in _TRUE_WORDS:
        return True
    if words and words[0] in _FALSE_WORDS:
        return False
    raise ValueError("expected yes or no")


def coerce_choice(text: str, choices: list[str] | tuple[str, ...]) -> str:
    """The choice the text names: exact, then prefix, then contained, then the closest by difflib."""
    options = [str(c) for c in choices]
    lowered = {o.lower(): o for o in options}
    value = text.strip().strip(".,;:!\"'*`").strip().lower()
    if not value:
        raise ValueError(f"empty; expected one of {options}")
    if value in lowered:
        return lowered[value]
    first = value.split()[0].strip(".,;:!\"'*`")
    if first in lowered:
        return lowered[first]
    starts = [o for low, o in lowered.items() if low.startswith(value) or value.startswith(low)]
    if len(starts) == 1:
        return starts[0]
    if starts:  # the longest option the text starts with: "irrelevant" over "relevant"
        return max(starts, key=len)
    contained = [(value.find(low), -len(low), o) for low, o in lowered.items() if low in value]
    if contained:
        return min(contained)[2]
    close = difflib.get_close_matches(first, list(lowered), n=1, cutoff=0.6) or difflib.get_close_matches(
        value, list(lowered), n=1, cutoff=0.6
    )
    if close:
        return lowered[close[0]]
    raise ValueError(f"expected one of {options}")


def coerce_number(text: str) -> float:
    match = _NUMBER.search(text)
    if not match:
        raise ValueError("expected a number")
    return float(match.group(0).replace(",", ""))


def coerce_list(raw: str, headers: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Items from a JSON list, or from lines that are bullets or numbered; otherwise one item per line. An item
    holding several questions ("Who was X? Who was Y?") is split into them: small models write a list of
    questions as one line or one JSON string, and a method must see each sub-question or query on its own."""
    text = clean_text(raw, headers)
    items = None
    if text.startswith("["):
        try:
            parsed = json.loads(text)
            if isinstance(parsed, list):
                items = [str(x) for x in parsed]
        except json.JSONDecodeError:
            pass
    if items is None:
        if text.strip().lower() in ("(none)", "none", "[]"):
            return []
        items = text.splitlines()
        if not any(_LIST_ITEM.sub("", line).strip() for line in items):
            raise ValueError("expected a list: lines, bullets or numbered items")
    parts = (_LIST_ITEM.sub("", part).strip() for item in items for part in _AFTER_QUESTION.split(item))
    return [part for part in parts if part]


_NOTHING = frozenset({"no", "none", "n/a", "na", "nothing", "empty", "(empty)", "(none)", "-"})


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w/()-]+", " ", text.lower()).split())


def _template_junk(signature: type[Signature], text: str) -> str | None:
    """The piece of the prompt template a value copies (a field description, a type hint), if it copies one."""
    value = _norm(text)
    if not value:
        return None
    if re.fullmatch(r"\(.*\)", value):  # "(yes)", "(no)": a type hint such as "(yes or no)" copied
        return text
    for name, field in signature.fields.items():
        desc = _norm(description(field))
        if len(desc) >= 8 and (value.startswith(desc) or (len(value) >= 8 and desc.startswith(value))):
            return desc
        if re.search(rf"\bthen {re.escape(name)}\b", text):
            return f"then {name}"
    return None


def _require_text(text: str, raw: str, *, optional: bool) -> str:
    if re.search(r"\w", text):
        return text
    if optional and not text:
        return ""
    raise ValueError("empty or only template markup")


def _may_be_empty(field) -> bool:
    """A str field may be empty when declared optional or when its description says it may be empty."""
    if not field.is_required() or _allows_none(field.annotation):
        return True
    return "empty" in description(field).lower()


def _offers_none(field) -> bool:
    """Whether a str field's description offers "none" as its value (IterDRAG's follow-up: "the next follow-up
    question, or none")."""
    return re.search(r"\bor none\b", description(field).lower()) is not None


def description(field) -> str:
    """A DSPy field's ``desc`` (what the prompt shows beside its name), or ""."""
    return (field.json_schema_extra or {}).get("desc", "") or ""


def _allows_none(annotation) -> bool:
    return get_origin(annotation) in (Union, types.UnionType) and type(None) in get_args(annotation)


def unwrap_optional(annotation):
    """``X`` for ``X | None`` (``Optional[X]``); any other annotation as it is."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def choices_of(annotation) -> tuple | None:
    """The options of a closed choice: a ``Literal``'s values or an ``Enum``'s member values; None for any other
    annotation (``bool`` included: callers that treat it as yes/no say so)."""
    if get_origin(annotation) is Literal:
        return get_args(annotation)
    if is_enum(annotation):
        return tuple(member.value for member in annotation)
    return None


def option_names(annotation) -> list[str] | None:
    """A closed choice's options as the adapter sends and reads them: "yes"/"no" for a ``bool``, else the
    ``choices_of`` values as strings; None for any other annotation."""
    if annotation is bool:
        return ["yes", "no"]
    choices = choices_of(annotation)
    return [str(c) for c in choices] if choices else None


def is_enum(annotation) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, enum.Enum)


def is_list(annotation) -> bool:
    """A list or tuple annotation: rendered as numbered lines, parsed from lines or bullets."""
    return annotation is list or get_origin(annotation) in (list, tuple)


def _coerce_json(text: str, annotation):
    try:
        return pydantic.TypeAdapter(annotation).validate_json(text)
    except pydantic.ValidationError:
        try:
            return pydantic.TypeAdapter(annotation).validate_python(text)
        except pydantic.ValidationError as e:
            raise ValueError(f"not a valid {annotation}: {e.errors()[0]['msg']}") from None
