"""A recipe's chain of files (`extends`) merged key by key, the root parent first and the child last: what each
layer sets replaces what the one before it set, and every value keeps the file, line and layer it came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generator.read.tomldoc import TomlDocument
from generator.resolve.argwords import flag_name, group_flags, merge_args, split_words
from generator.resolve.model import CONTAINER_KEYS, DEFAULT, RECIPE_SCALARS, Arg, Mount, Origin, container_target


def env_text(value: str | int) -> str:
    """An env or build-arg value as the container sees it: TOML integers are their decimal text."""
    return value if isinstance(value, str) else str(value)


@dataclass
class Layers:
    """The merged values so far; `add` lays one more file over them."""

    image_dir_base: Path
    values: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, Origin] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    env_origins: dict[str, Origin] = field(default_factory=dict)
    mounts: list[Mount] = field(default_factory=list)
    pass_env: dict[str, None] = field(default_factory=dict)
    unused: list[tuple[Origin, str, str]] = field(default_factory=list)  # remove_args / remove_env naming nothing
    args: tuple[Arg, ...] = ()
    ray_args: tuple[Arg, ...] = ()
    build_args: dict[str, str] = field(default_factory=dict)
    build_arg_origins: dict[str, Origin] = field(default_factory=dict)
    container: dict[str, object] = field(default_factory=dict)
    setup: tuple[Arg, ...] = ()
    bench_tables: list[dict[str, Any]] = field(default_factory=list)
    mods_from: tuple[TomlDocument, str] | None = None  # the file that set `mods` (its folder finds them)

    def add(self, doc: TomlDocument, layer: str) -> None:
        self._scalars(doc, layer)
        self._env(doc, layer)
        self._tables(doc, layer)
        self._mounts(doc, layer)
        self._args(doc, layer)

    def _scalars(self, doc: TomlDocument, layer: str) -> None:
        data = doc.data
        for key in (*RECIPE_SCALARS, *CONTAINER_KEYS):
            if key in data:
                (self.container if key in CONTAINER_KEYS else self.values)[key] = data[key]
                self.origins[key] = doc.origin(layer, (key,))
        for key in ("build_args", "setup", "bench", "mods", "mods_transport", "ray_args", "pass_env"):
            if key in data:
                self.origins[key] = doc.origin(layer, (key,))
        if "mods_transport" in data:  # not in RECIPE_SCALARS: a recipe without it keeps its input hash
            self.values["mods_transport"] = data["mods_transport"]
        if "setup" in data:
            self.setup = tuple(Arg(cmd, doc.origin(layer, ("setup", i), value=True))
                               for i, cmd in enumerate(data["setup"]))
        if "bench" in data:
            self.bench_tables.append(data["bench"])
        if "mods" in data:
            self.mods_from = (doc, layer)
        if "docker_image_dir" in data:  # a build context is found from the file that names it
            self.image_dir_base = doc.path.parent

    def _env(self, doc: TomlDocument, layer: str) -> None:
        data = doc.data
        for i, name in enumerate(data.get("remove_env", [])):
            if name not in self.env:
                self.unused.append((doc.origin(layer, ("remove_env", i), value=True), "remove_env", name))
            self.env.pop(name, None)
            self.env_origins.pop(name, None)
        for name, value in data.get("env", {}).items():
            self.env[name] = env_text(value)
            self.env_origins[name] = doc.origin(layer, ("env", name))
        self.pass_env.update(dict.fromkeys(data.get("pass_env", [])))

    def _tables(self, doc: TomlDocument, layer: str) -> None:
        for name, value in doc.data.get("build_args", {}).items():
            self.build_args[name] = env_text(value)
            self.build_arg_origins[name] = doc.origin(layer, ("build_args", name))
        if "ray_args" in doc.data:
            self.ray_args = merge_args(self.ray_args, split_words(doc, doc.data["ray_args"], layer, key="ray_args"),
                                       set())

    def _mounts(self, doc: TomlDocument, layer: str) -> None:
        """A child's mount replaces its parent's on the same folder (/data and /data/ are one); two on one folder
        in the same file are kept for the lint rule mount-target to report, never dropped."""
        if "extra_mounts" not in doc.data:
            return
        own = [Mount(m["host"], m["container"], m.get("read_only", False), doc.origin(layer, ("extra_mounts", i)))
               for i, m in enumerate(doc.data["extra_mounts"])]
        inherited = {container_target(m.container): i for i, m in enumerate(self.mounts)}
        for mount in own:
            at = inherited.pop(container_target(mount.container), None)
            if at is None:
                self.mounts.append(mount)
            else:  # in the parent's place, as explain and the compose file have always listed it
                self.mounts[at] = mount

    def _args(self, doc: TomlDocument, layer: str) -> None:
        data = doc.data
        if "args" not in data and "remove_args" not in data:
            return
        flags_inherited = {g.flag for g in group_flags(self.args)}
        self.unused += [(doc.origin(layer, ("remove_args", i), value=True), "remove_args", flag)
                        for i, flag in enumerate(data.get("remove_args", []))
                        if (flag_name(flag) or flag) not in flags_inherited]
        words = split_words(doc, data.get("args", []), layer)
        self.args = merge_args(self.args, words, set(data.get("remove_args", [])))
        self.origins["args"] = doc.origin(layer, ("args",)) if "args" in data else self.origins.get("args", DEFAULT)
