"""verify reads a large repeated block (the group watch, in every rank's file) back once on its own, not in every
file: the file's own parse sees a string in its place. What must still hold: the block is checked, a block that
does not read back as its text is parsed in place (and so still caught), and the rest of the file is verified."""

from __future__ import annotations

import pytest

from generator.diagnostics import RecipegenError
from generator.render.templates import LARGE_BLOCK, block, large_blocks
from generator.write.verify import BLOCK_READ_ONCE, verify_compose

TEXT = "".join(f"line {i}: $HOME 'q' \"d\" \\ ✓\n" for i in range(LARGE_BLOCK // 20))


def compose(word: str, image: str = "img") -> str:
    return f"services:\n  engine:\n    image: {image}\n    entrypoint:\n      - python3\n      - {word}\n"


def test_a_large_block_is_read_back_once_and_stands_as_a_string():
    rendered = block(TEXT, 8)
    assert (rendered, TEXT.replace("$", "$$")) not in large_blocks()  # rendered once: its file's parse reads it
    assert block(TEXT, 8) is rendered and (rendered, TEXT.replace("$", "$$")) in large_blocks()
    document = verify_compose(compose(rendered), "f", large_blocks())
    assert document["services"]["engine"]["entrypoint"] == ["python3", BLOCK_READ_ONCE.strip('"')]
    whole = verify_compose(compose(rendered), "f")  # without the shortcut: the text itself
    assert whole["services"]["engine"]["entrypoint"][1] == TEXT.replace("$", "$$")


def test_a_block_that_does_not_read_back_as_its_text_is_parsed_in_place():
    rendered = block(TEXT, 8)
    wrong = ((rendered, "another text"),)
    document = verify_compose(compose(rendered), "f", wrong)
    assert document["services"]["engine"]["entrypoint"][1] == TEXT.replace("$", "$$")


def test_the_rest_of_the_file_is_still_verified():
    rendered = block(TEXT, 8)
    with pytest.raises(RecipegenError, match="compose-spec"):
        verify_compose(compose(rendered, image="[1, 2]"), "f", large_blocks())
