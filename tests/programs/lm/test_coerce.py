"""Reading a field's text back into its type: closed choices read one way, whatever declares them."""

import enum
from typing import Literal

import dspy
import pytest

from ragscale.programs.lm.coerce import FieldParseError, choices_of, coerce_field


class Colour(enum.Enum):
    RED = "red"
    DARK_RED = "dark red"


class Paint(dspy.Signature):
    """Pick a colour."""

    wall: str = dspy.InputField()
    literal: Literal["red", "dark red"] = dspy.OutputField()
    member: Colour = dspy.OutputField()


def test_a_literal_and_an_enum_offer_their_values_as_choices_and_other_annotations_none():
    assert choices_of(Literal["red", "dark red"]) == ("red", "dark red")
    assert choices_of(Colour) == ("red", "dark red")
    assert choices_of(bool) is None and choices_of(str) is None and choices_of(list[str]) is None


@pytest.mark.parametrize(
    ("raw", "literal", "member"), [(" dark red.", "dark red", Colour.DARK_RED), ("Red", "red", Colour.RED)]
)
def test_a_literal_reads_back_as_its_option_and_an_enum_as_its_member(raw, literal, member):
    assert coerce_field(Paint, "literal", raw) == literal
    assert coerce_field(Paint, "member", raw) is member


def test_text_that_names_no_option_fails_naming_the_field():
    with pytest.raises(FieldParseError, match=r"Paint\.member: expected one of \['red', 'dark red'\]"):
        coerce_field(Paint, "member", "blue")


@pytest.mark.parametrize("raw", [" none", " (none)", " (None)", " None."])
def test_a_field_that_offers_none_as_a_value_reads_none_as_none_rather_than_as_a_copied_template(raw):
    from ragscale.signatures import Decompose

    assert coerce_field(Decompose, "follow_up", raw) == "none"  # a trace of the step, and so its demo, says none
    assert coerce_field(Decompose, "follow_up", " Who wrote it?") == "Who wrote it?"
