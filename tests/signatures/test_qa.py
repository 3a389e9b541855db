"""The QA prompts say what the programs that read their answers expect: the documents' order, the closed choice of a
grade, and the word that ends IterDRAG's follow-ups."""

import typing

from ragscale.programs.crag import GRADES
from ragscale.programs.iterdrag import no_follow_up
from ragscale.signatures.qa import Answer, AnswerSub, Decompose, Grade, Synthesize


def test_the_documents_an_answer_reads_are_described_most_relevant_last_as_the_programs_order_them():
    for signature in (Answer, AnswerSub):
        assert "most relevant last" in signature.input_fields["documents"].json_schema_extra["desc"]
    assert list(Synthesize.input_fields) == ["documents", "question", "follow_ups"]


def test_a_grade_is_a_closed_choice_of_the_grades_crag_counts():
    assert set(typing.get_args(Grade.output_fields["grade"].annotation)) == set(GRADES)


def test_the_decomposition_is_told_to_write_the_word_that_ends_iterdrags_loop():
    assert "write: none" in Decompose.instructions and no_follow_up("none")
    assert Decompose.input_fields["follow_ups"].annotation == list[str]
