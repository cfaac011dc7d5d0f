"""Shared by the tests: moved from tests/test_serve_lab.py, which uses them too."""

from __future__ import annotations

from pathlib import Path
import pytest

TESTS = Path(__file__).resolve().parent.parent


def needs_llama_benchy() -> None:
    """The bench extra; in CI (which installs `.[test]`, including it) its absence is a failure, not a skip."""
    import importlib.util
    import os

    if importlib.util.find_spec("llama_benchy") is None:
        why = "llama-benchy is not installed (pip install -e '.[bench]')"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)


def word_level_tokenizer(text: str, path: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    # llama-benchy's warm-up and coherence prompts are counted with it too
    extra = "Warmup . What is the capital of France ? Please reply with one word only"
    tokenizer.train_from_iterator([text, extra], trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    tokenizer.save(str(path))
    return path
