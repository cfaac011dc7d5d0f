"""Where a recipe's build context is, found one way for the planner (which writes `build:`) and the lint rules
(which say why there is none, or why Docker would refuse it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from generator.resolve.model import Recipe

DEFAULT_DOCKERFILE = "Dockerfile"


@dataclass(frozen=True)
class BuildContext:
    """`docker_image_dir` as found: the folder (None when no candidate is a folder), the candidates looked at in
    order, and the Dockerfile's name as the recipe gives it (relative to the folder, as Compose reads it)."""

    folder: Path | None
    looked: tuple[Path, ...]
    dockerfile: str

    @property
    def dockerfile_path(self) -> Path | None:
        return None if self.folder is None else self.folder / self.dockerfile

    @property
    def usable(self) -> bool:
        """A folder holding the Dockerfile: what `docker compose build` can build."""
        path = self.dockerfile_path
        return path is not None and path.is_file()


def find_build_context(recipe: Recipe, root: Path) -> BuildContext | None:
    """`docker_image_dir` is looked for beside the recipe (the file that set it), under images/, then at the
    project root; the first candidate holding the Dockerfile wins, else the first that is a folder."""
    if not recipe.docker_image_dir:
        return None
    name = recipe.dockerfile or DEFAULT_DOCKERFILE
    looked = (recipe.image_dir_base / recipe.docker_image_dir, root / "images" / recipe.docker_image_dir,
              root / recipe.docker_image_dir)
    folders = [c for c in looked if c.is_dir()]
    holding = [c for c in folders if (c / name).is_file()]
    chosen = (holding or folders)[0] if folders else None
    return BuildContext(chosen, looked, name)
