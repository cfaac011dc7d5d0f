"""What a recipe's `model` (or a draft model) names: a Hugging Face id or a path in the container. One reading
for every command (`models`, preflight's look in the cache, lint), as the engines read it.

vLLM and SGLang hand `model` to transformers / huggingface_hub: a folder that exists is loaded as is, anything
else must be a repo id (huggingface_hub's validate_repo_id: `name` or `namespace/name`, word characters, `-`
and `.`, neither `--` nor `..`, no `.git` ending, at most 96 characters), which the hub cache keeps under
`hub/models--namespace--name`. So `gpt2` (a legacy id without namespace) is a hub id like `Qwen/Qwen3-32B`,
and `/models/x`, `./x`, `../x`, `~/x` or `a/b/c` can only be paths (relative ones from the container's working
directory; nothing expands `~`). A hub id that also names a folder in the container's working directory is
loaded from that folder by the engine: recipegen cannot see the image's working directory, so it reads an id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_REPO_ID = re.compile(r"(\b[\w\-.]+\b/)?\b[\w\-.]+\b")  # huggingface_hub's REPO_ID_REGEX
_REPO_ID_MAX = 96
_PATH_STARTS = ("/", "./", "../", "~")


@dataclass(frozen=True)
class ModelRef:
    text: str  # as the recipe gives it
    hub_id: str | None  # the Hugging Face id; None: a path in the container

    @property
    def cache_folder(self) -> str | None:
        """The folder under the cache's hub/ that holds this id (`models--org--name`); None for a path."""
        return None if self.hub_id is None else "models--" + self.hub_id.replace("/", "--")

    def container_dir(self, cache_in_container: str) -> str:
        """Where the engine finds it inside the container, the cache being mounted at `cache_in_container`."""
        folder = self.cache_folder
        return self.text if folder is None else f"{cache_in_container}/hub/{folder}"


def read_model(text: str) -> ModelRef:
    """`text` read as the engine reads it: a Hugging Face id, else a path in the container."""
    is_path = (text in (".", "..") or text.startswith(_PATH_STARTS) or len(text) > _REPO_ID_MAX
               or not _REPO_ID.fullmatch(text) or "--" in text or ".." in text or text.endswith(".git"))
    return ModelRef(text, None if is_path else text)
