"""The engine KV buffers: rows that leave a batch are filled from its end."""


def test_survivors_keeps_rows_in_place_and_fills_holes_from_the_end():
    from ragscale.programs.lm.kv import survivors

    assert survivors([0, 1, 2]) == [0, 1, 2]
    assert survivors([1, 3, 4]) == [3, 1, 4]  # row 1 stays; rows 3 and 4 fill the holes 0 and 2
    assert survivors([0, 2, 5]) == [0, 5, 2]
