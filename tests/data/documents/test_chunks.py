"""The chunker: headings kept with their paragraphs, budgets kept, sentences split; tables as markdown."""

from ragscale.data.documents import (
    Block,
    chunk_blocks,
    chunk_text,
    table_markdown,
)


def test_the_chunker_keeps_a_heading_with_its_paragraphs_and_repeats_it_on_overflow():
    blocks = [
        Block("heading", "Cargo"),
        Block("paragraph", " ".join(["alpha"] * 30)),
        Block("paragraph", " ".join(["beta"] * 30)),
        Block("heading", "Fishing"),
        Block("paragraph", "The fleet shrank."),
    ]
    chunks = chunk_blocks(blocks, max_tokens=40)
    assert chunks[0].startswith("Cargo\n\nalpha")
    assert chunks[1].startswith("Cargo\n\nbeta")  # the section continues under its heading
    assert chunks[2] == "Fishing\n\nThe fleet shrank."
    assert all(len(c.split()) <= 40 for c in chunks)
    assert not any(c.rstrip().endswith(("Cargo", "Fishing")) for c in chunks)


def test_a_grid_of_mostly_empty_cells_is_not_a_table():
    assert table_markdown([["2019 2018", ""], ["", "6"], ["2015", ""]]) is None
    assert table_markdown([["a", "b"], ["1", "2"]]) == "| a | b |\n| --- | --- |\n| 1 | 2 |"


def test_chunks_keep_whole_paragraphs_within_the_budget():
    text = "one two three\n\nfour five\n\nsix seven eight nine"
    assert chunk_text(text, max_tokens=5) == ["one two three\n\nfour five", "six seven eight nine"]


def test_a_paragraph_longer_than_the_budget_is_split_at_sentences_then_words():
    text = "Alpha beta gamma. Delta epsilon. " + " ".join(f"w{i}" for i in range(7))
    chunks = chunk_text(text, max_tokens=3)
    assert chunks[0] == "Alpha beta gamma."
    assert all(len(c.split()) <= 3 for c in chunks)
    assert " ".join(" ".join(chunks).split()) == " ".join(text.split())
