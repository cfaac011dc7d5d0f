"""Where things are: the project root (the folder holding recipes/ or cluster.toml), its recipes and files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from generator.diagnostics import Diagnostic, RecipegenError, display_path
from generator.resolve import RECIPE_FILE, recipe_file

CLUSTER_FILE = "cluster.toml"


@dataclass(frozen=True)
class Project:
    root: Path

    @classmethod
    def find(cls, start: Path | None = None) -> "Project":
        start = (start or Path.cwd()).resolve()
        for folder in (start, *start.parents):
            if (folder / "recipes").is_dir() or (folder / CLUSTER_FILE).is_file():
                return cls(folder)
        return cls(start)

    @property
    def recipes_dir(self) -> Path:
        return self.root / "recipes"

    @property
    def default_cluster(self) -> Path:
        return self.root / CLUSTER_FILE

    @property
    def default_out(self) -> Path:
        return self.root / "out"

    def all_recipes(self) -> list[Path]:
        if not self.recipes_dir.is_dir():
            return []
        return sorted(p / RECIPE_FILE for p in self.recipes_dir.iterdir() if (p / RECIPE_FILE).is_file())

    def cluster_files(self) -> list[Path]:
        found = [self.default_cluster] if self.default_cluster.is_file() else []
        clusters = self.root / "clusters"
        if clusters.is_dir():
            found += sorted(clusters.glob("*.toml"))
        return found

    def recipe_path(self, ref: str) -> Path:
        """RECIPE on the command line: a recipe.toml, its folder, or a recipe id under recipes/."""
        path = Path(ref)
        if path.exists():
            return recipe_file(path)
        by_id = self.recipes_dir / ref / RECIPE_FILE
        if by_id.is_file():
            return by_id
        raise RecipegenError(Diagnostic(display_path(ref), None, None, None,
                                        f"no such recipe (not a file, a folder with {RECIPE_FILE}, "
                                        f"or a recipe id under {display_path(self.recipes_dir)})"))
