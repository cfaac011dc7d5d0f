"""verify reads a large repeated block (the group watch, in every rank's file) back once on its own, not in every
file: the file's own parse sees a string in its place. What must still hold: the block is checked where it stands
(after its line's start, so a wrong indentation is caught), a block that does not read back as its text is parsed
in place (and so still caught), and the rest of the file is verified."""

from __future__ import annotations

import pytest

from generator.diagnostics import RecipegenError
from generator.render.templates import LARGE_BLOCK, block, large_blocks
from generator.write.verify import BLOCK_READ_ONCE, verify_compose


def text(tag: str) -> str:
    """A large text of its own for each test (the render cache and its counts live as long as the process)."""
    return "".join(f"{tag} line {i}: $HOME 'q' \"d\" \\ ✓\n" for i in range(LARGE_BLOCK // 20))


def compose(word: str, image: str = "img") -> str:
    return f"services:\n  engine:\n    image: {image}\n    entrypoint:\n      - python3\n      - {word}\n"


def test_a_large_block_is_read_back_once_and_stands_as_a_string():
    value = text("once")
    rendered = block(value, 8)
    assert (rendered, value.replace("$", "$$")) not in large_blocks()  # rendered once: its file's parse reads it
    assert block(value, 8) is rendered and (rendered, value.replace("$", "$$")) in large_blocks()
    document = verify_compose(compose(rendered), "f", large_blocks())
    assert document["services"]["engine"]["entrypoint"] == ["python3", BLOCK_READ_ONCE.strip('"')]
    whole = verify_compose(compose(rendered), "f")  # without the shortcut: the text itself
    assert whole["services"]["engine"]["entrypoint"][1] == value.replace("$", "$$")


def test_a_block_that_does_not_read_back_as_its_text_is_parsed_in_place():
    value = text("wrong")
    rendered = block(value, 8)
    document = verify_compose(compose(rendered), "f", ((rendered, "another text"),))
    assert document["services"]["engine"]["entrypoint"][1] == value.replace("$", "$$")


def test_a_block_at_the_wrong_indentation_is_still_caught():
    """Indented as deep as its `- ` and no deeper: the file does not read; the shortcut must not hide that."""
    value = text("indent")
    rendered = block(value, 6)
    block(value, 6)
    assert (rendered, value.replace("$", "$$")) in large_blocks()
    with pytest.raises(RecipegenError, match="does not read back"):
        verify_compose(compose(rendered), "f", large_blocks())


def test_the_rest_of_the_file_is_still_verified():
    value = text("rest")
    rendered = block(value, 8)
    with pytest.raises(RecipegenError, match="compose-spec"):
        verify_compose(compose(rendered, image="[1, 2]"), "f", ((rendered, value.replace("$", "$$")),))
