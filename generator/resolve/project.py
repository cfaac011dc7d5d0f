"""Where things are: the project root (the folder holding recipes/ or cluster.toml), its recipes and files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from generator.diagnostics import Diagnostic, RecipegenError, Severity, display_path
# Here, not in load.py (which re-exports them): finding the project must not import the loaders (a no-change
# build decides before loading anything: generator/write/uptodate.py).
RECIPE_FILE = "recipe.toml"
CLUSTER_FILE = "cluster.toml"


def recipe_file(path: str | Path) -> Path:
    """A recipe is named by its recipe.toml or by the folder holding it."""
    path = Path(path)
    return path / RECIPE_FILE if path.is_dir() else path


@dataclass(frozen=True)
class Project:
    root: Path

    @classmethod
    def find(cls, start: Path | None = None) -> "Project":
        return cls._around(start or Path.cwd()) or cls((start or Path.cwd()).resolve())

    @classmethod
    def around(cls, start: Path) -> "Project | None":
        """The project holding `start` (a file or folder): the nearest folder with recipes/ or cluster.toml."""
        return cls._around(start)

    @classmethod
    def _around(cls, start: Path) -> "Project | None":
        folder = start.resolve()
        if not folder.is_dir():
            folder = folder.parent
        for candidate in (folder, *folder.parents):
            if (candidate / "recipes").is_dir() or (candidate / CLUSTER_FILE).is_file():
                return cls(candidate)
        return None

    @classmethod
    def of(cls, refs: tuple[str, ...] | list[str] = (), cluster: Path | None = None) -> "Project":
        """The project the given recipe paths live in, so `cd /tmp && recipegen build /p/recipes/x` writes what
        `cd /p && recipegen build recipes/x` writes (headers, out/). Recipe ids are looked up in the working
        directory's project; with none around, the cluster file's project; the working directory last."""
        for ref in refs:
            if Path(ref).exists():
                found = cls._around(Path(ref))
                if found is not None:
                    return found
        here = cls._around(Path.cwd())
        if here is None and cluster is not None and cluster.exists():
            here = cls._around(cluster)
        return here or cls(Path.cwd().resolve())

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
        return sorted(p / RECIPE_FILE for p in self.recipes_dir.iterdir()
                      if (p / RECIPE_FILE).is_file() and linked(p / RECIPE_FILE) is None)

    def skipped_recipes(self) -> list[Diagnostic]:
        return skipped_entries(self.recipes_dir)

    def cluster_files(self) -> list[Path]:
        found = [self.default_cluster] if self.default_cluster.is_file() else []
        clusters = self.root / "clusters"
        if clusters.is_dir():
            found += sorted(clusters.glob("*.toml"))
        return found

    def recipe_paths(self, refs: tuple[str, ...] | list[str]) -> list[Path]:
        """The recipes named on the command line (all of recipes/ when none), each once; two recipes with the
        same id would write the same out/ folder, so that is an error naming both."""
        paths = [self.recipe_path(r) for r in refs] if refs else self.all_recipes()
        unique: dict[Path, Path] = {}
        for path in paths:
            unique.setdefault(path.resolve(), path)
        by_id: dict[str, Path] = {}
        for real, path in unique.items():
            other = by_id.setdefault(real.parent.name, path)
            if other is not path:
                raise RecipegenError(Diagnostic(display_path(path), None, None, None,
                                                f"recipe id '{real.parent.name}' is also the id of "
                                                f"{display_path(other)}: both would write out/{real.parent.name}"))
        return list(unique.values())

    def recipe_id(self, ref: str) -> str:
        """The id RECIPE names, without reading it: the folder of a recipe.toml, or the id itself."""
        path = Path(ref)
        if path.is_file() or (path / RECIPE_FILE).is_file():
            return recipe_file(path).resolve().parent.name
        return ref.rstrip("/")

    def check_out_dir(self, out: Path) -> None:
        """Refuse an output folder that would hold, or sit inside, the project's sources."""
        real, root, recipes = out.resolve(), self.root.resolve(), self.recipes_dir.resolve()
        if out.exists() and not out.is_dir():
            problem = "is a file, not a folder"
        elif real == root or root.is_relative_to(real):
            problem = "would contain the project itself; pick a folder of its own (default: out/)"
        elif real.is_relative_to(recipes):
            problem = "is inside recipes/; pick a folder of its own (default: out/)"
        else:
            return
        raise RecipegenError(Diagnostic(display_path(out), None, None, None, f"output folder {problem}"))

    def recipe_path(self, ref: str) -> Path:
        """RECIPE on the command line: a recipe.toml, a folder holding one, or a recipe id under recipes/."""
        path = Path(ref)
        if path.is_file() and path.name != RECIPE_FILE:
            # The id is the folder's name: building other.toml would replace the output of the folder's recipe.
            raise RecipegenError(Diagnostic(display_path(path), None, None, None,
                                            f"a recipe file must be named {RECIPE_FILE}: its id is its folder's "
                                            f"name, so this would be built as '{path.resolve().parent.name}' and "
                                            f"replace out/{path.resolve().parent.name}; move it to a folder of its "
                                            f"own as {RECIPE_FILE}"))
        found = recipe_file(path) if path.is_file() or (path / RECIPE_FILE).is_file() else \
            self.recipes_dir / ref / RECIPE_FILE
        if found.is_file():
            why = linked(found)
            if why is not None:
                shown = f"{display_path(found.parent.parent)}/{found.parent.name}"  # the link, not its target
                raise RecipegenError(Diagnostic(shown, None, None, None, why))
            return found
        if path.is_dir():
            return recipe_file(path)  # reported as a folder without recipe.toml
        raise RecipegenError(Diagnostic(display_path(ref), None, None, None,
                                        f"no such recipe (not a file, a folder with {RECIPE_FILE}, "
                                        f"or a recipe id under {display_path(self.recipes_dir)})"))


def linked(recipe: Path) -> str | None:
    """Why a recipe reached through a symlink (its folder, or its recipe.toml) is no recipe of its own: its id is
    the name of the folder the link leads to, so it would build as that recipe (and a full build, meeting that
    recipe twice, would build it once). None for a recipe that is where it is named."""
    given, real = recipe.absolute().parent.name, recipe.resolve().parent.name
    if given == real:
        return None
    return (f"is a symlink to the recipe '{real}': a recipe's id is its folder's name, so it would build as "
            f"'{real}'; make it a folder of its own (`extends = \"{real}\"` takes the rest from it)")


def skipped_entries(folder: Path) -> list[Diagnostic]:
    """One warning per entry of a recipes folder that `all_recipes` leaves out, naming it and why: a recipe that is
    silently not built is worse than one that fails. Dotfiles (.gitkeep, editors' files) are not entries."""
    if not folder.is_dir():
        return []
    found = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        recipe = entry / RECIPE_FILE
        if not entry.is_dir():
            if entry.suffix.lower() not in (".toml", ".tml"):
                continue  # a README beside the recipes is not a recipe someone expects built
            why = f"is not a folder: a recipe is recipes/<id>/{RECIPE_FILE} (move it to {entry.stem}/{RECIPE_FILE})"
        elif recipe.is_file():
            link = linked(recipe)
            if link is None:
                continue
            why = link
        elif recipe.is_symlink() and not recipe.exists():
            why = f"{RECIPE_FILE} is a symlink to a missing file ({recipe.readlink()})"
            entry = recipe
        elif recipe.is_dir():
            why = f"{RECIPE_FILE} is a folder, not a file"
            entry = recipe
        elif recipe.exists():
            why = f"{RECIPE_FILE} is not a regular file"
            entry = recipe
        else:
            near = sorted(p.name for p in entry.iterdir() if p.suffix.lower() in (".toml", ".tml")
                          or p.name.lower().startswith("recipe"))
            why = (f"has no {RECIPE_FILE}" + (f" ({', '.join(near)} is not that name)" if near else ""))
        shown = f"{display_path(entry.parent)}/{entry.name}"  # the link itself, not where it points
        found.append(Diagnostic(shown, None, None, None, f"skipped: {why}", Severity.WARNING))
    return found
