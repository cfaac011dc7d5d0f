"""One reading of a recipe's model for every command: `recipegen models` (which models it copies, into which
cache folder) and preflight (where the trial container looks) read `gpt2`, `./name` ... the same way, the way
the engines do (a folder path, else a Hugging Face id as huggingface_hub validates it)."""

from __future__ import annotations

import pytest

from generator.deploy.preflight import model_dir
from generator.resolve.modelid import read_model
from generator.transfer import hf

CACHE = "/root/.cache/huggingface"

# (model, the Hugging Face id the engine asks the hub for, or None when the engine loads it as a path)
CASES = [
    ("Qwen/Qwen3-32B", "Qwen/Qwen3-32B"),
    ("gpt2", "gpt2"),  # a legacy id without namespace: the hub has it, the cache holds models--gpt2
    ("bert-base-uncased", "bert-base-uncased"),
    ("org/model.v1_2", "org/model.v1_2"),
    ("./name", None),
    ("../models/x", None),
    (".", None),
    ("/models/x", None),
    ("~/models/x", None),  # nothing expands ~: a relative path to a folder named ~
    ("a/b/c", None),  # more than one slash: no repo id has it
    ("org/na--me", None),  # validate_repo_id refuses `--` and `..`
    ("org/x..y", None),
    ("org/name.git", None),
    ("org/-name", None),  # a part must start and end with a word character
    ("x" * 97, None),  # longer than 96
]


@pytest.mark.parametrize("model, hub_id", CASES, ids=[c[0][:20] for c in CASES])
def test_every_command_reads_a_model_one_way(model: str, hub_id: str | None) -> None:
    assert read_model(model).hub_id == hub_id
    if hub_id is None:
        assert model_dir(model) == model  # preflight looks where the engine loads it
        with pytest.raises(ValueError, match="path in the container"):
            hf.repo_folder(model)  # `models` copies no path
    else:
        folder = "models--" + hub_id.replace("/", "--")
        assert hf.repo_folder(model) == folder
        assert model_dir(model) == f"{CACHE}/hub/{folder}"
