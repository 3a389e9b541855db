"""What a configuration carries from a finished smaller iteration cap: decided by what a method declares
(``Method.reaches_cap``), never by its name."""

import pytest

from ragscale.experiments.sweep.carry import source_of, stopped_before_cap
from ragscale.experiments.sweep.grid import Point
from ragscale.programs import PROGRAMS
from ragscale.programs.base import Method


class Looping(Method):
    """A method whose loop counts its rounds in ``loops``: the count equals the cap when the cap ended the loop."""

    name = "looping"
    iterates = True
    reaches_cap = "loops"


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(PROGRAMS, Looping.name, Looping)


def test_a_method_declaring_the_count_that_reaches_its_cap_carries_from_the_largest_smaller_finished_cap(registered):
    keys = {Point("looping", 2, 0, 2): "two", Point("looping", 2, 0, 3): "three", Point("looping", 5, 0, 2): "other"}
    assert source_of(Point("looping", 2, 0, 4), keys, {"two": {}, "other": {}}) == Point("looping", 2, 0, 2)
    assert source_of(Point("looping", 2, 0, 4), keys, {"two": {}, "three": {}}) == Point("looping", 2, 0, 3)
    assert source_of(Point("looping", 2, 0, 2), keys, {"two": {}}) is None


def test_a_method_declaring_no_such_count_carries_nothing():
    keys = {Point("iterdrag", 2, 0, 2): "a", Point("rag", 2, 0, 0): "b"}
    assert source_of(Point("rag", 2, 0, 0), keys, {"a": {}, "b": {}}) is None
    assert source_of(Point("iterdrag", 2, 0, 3), keys, {"a": {}}) == Point("iterdrag", 2, 0, 2)


def test_the_questions_carried_are_those_whose_count_stayed_under_the_cap_without_an_error(registered):
    records = [
        {"id": "1", "behaviour": {"loops": 1}, "error": None},
        {"id": "2", "behaviour": {"loops": 2}, "error": None},
        {"id": "3", "behaviour": {}, "error": "RuntimeError: boom"},
    ]
    assert [r["id"] for r in stopped_before_cap("looping", records, 2)] == ["1"]
