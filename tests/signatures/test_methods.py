"""The prompts of the multi-step and self-reflective methods say what their programs read back: Self-RAG's
critiques as closed types, Search-in-the-Chain's verdict as a yes/no, IRCoT's marker of the answer sentence."""

import typing

from ragscale.programs.ircot import ANSWER_MARKER
from ragscale.programs.self_rag import SUPPORT_RANK
from ragscale.signatures.methods import CheckSupport, ContinueReasoning, DecideRetrieval, RateUsefulness, Verify


def test_self_rags_critiques_are_a_yes_no_a_closed_choice_of_its_support_levels_and_a_number():
    assert DecideRetrieval.output_fields["needs_retrieval"].annotation is bool
    assert set(typing.get_args(CheckSupport.output_fields["support"].annotation)) == set(SUPPORT_RANK)
    assert RateUsefulness.output_fields["usefulness"].annotation is int


def test_a_verified_step_says_yes_or_no_beside_the_answer_the_documents_support():
    assert Verify.output_fields["supported"].annotation is bool
    assert list(Verify.output_fields) == ["supported", "answer"]


def test_the_reasoning_step_is_told_the_words_ircot_stops_at():
    assert ANSWER_MARKER in ContinueReasoning.instructions.lower()
