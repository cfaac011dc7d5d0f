"""Load recipes (following `extends`) and clusters into typed objects, with defaults and origins.

Schema validation happens here, per file, before anything reads a value: a later stage can trust types.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from generator.diagnostics import Diagnostic, RecipegenError
from generator.read.schemas import schema, valid_part, validate_document
from generator.read.tomldoc import TomlDocument, load_toml, parse_toml
from generator.read.units import size_bytes
from generator.resolve.argwords import group_flags, split_words
from generator.resolve.benchtable import bench_table, merged
from generator.resolve.layers import Layers, env_text
from generator.resolve.model import (CONTAINER_KEYS, DEFAULT, ENGINE_DEFAULT_ENTRYPOINT, RECIPE_ID, Cluster,
                                     ContainerOptions, Mod, Node, Recipe, Router, Ulimits)
from generator.resolve.metrics import load_metrics
from generator.resolve.mods import image_context, image_refusal, in_image, load_mods

from generator.resolve.project import RECIPE_FILE as RECIPE_FILE, recipe_file as recipe_file  # noqa: E402


def load_checked(path: Path, kind: str, collect: list[Diagnostic] | None = None) -> TomlDocument:
    """The document, schema-checked. With `collect`, schema problems are added to it and the document comes
    back without its invalid keys (when the rest can stand), so `validate` can lint it too; `dropped` on the
    document names the keys removed."""
    doc = load_toml(path)
    problems = validate_document(doc, kind)
    if problems:
        part = valid_part(doc.data, kind) if collect is not None else None
        if part is None or collect is None:
            raise RecipegenError(problems)
        collect.extend(problems)
        doc = TomlDocument(doc.path, doc.text, part[0], doc.shown, dropped=frozenset(part[1]))
    return doc


def load_recipe(path: str | Path, recipes_dir: Path | None = None,
                collect: list[Diagnostic] | None = None) -> Recipe:
    """Load a recipe and its chain of parents; the child's values win, key by key. With `collect`, schema
    problems are collected there and the recipe is built from the valid keys (see load_checked)."""
    path = recipe_file(path)
    chain = _load_chain(path, recipes_dir, collect)
    child = chain[0]
    recipe_id = path.resolve().parent.name
    if not RECIPE_ID.fullmatch(recipe_id):
        raise RecipegenError(Diagnostic(child.shown, None, None, None,
                                        f"recipe folder name '{recipe_id}' cannot be a recipe id: it names the "
                                        "Compose project and Swarm stack, so lowercase letters, digits, '-' and "
                                        f"'_' only (e.g. '{_suggest_id(recipe_id)}')"))
    merged_layers = Layers(path.parent)
    for depth, doc in enumerate(reversed(chain)):  # root parent first, the child last
        merged_layers.add(doc, "recipe" if depth == len(chain) - 1 else f"parent recipe {doc.path.parent.name}")
    return _recipe(path, recipe_id, chain, merged_layers, recipes_dir)


def _recipe(path: Path, recipe_id: str, chain: list[TomlDocument], merged_layers: Layers,
            recipes_dir: Path | None) -> Recipe:
    """The Recipe of the merged layers: required keys checked, schema defaults filled in, mods read."""
    m = merged_layers
    values, origins = m.values, m.origins
    missing = [k for k in ("engine", "docker_image", "model") if k not in values]
    if missing:
        raise RecipegenError(chain[0].diagnostic((), f"missing required key '{missing[0]}' (not set by this recipe "
                                                  "or any parent)", at_value=False))
    props = schema("recipe")["properties"]

    if "nodes" in values and "required_nodes" not in values:  # naming the nodes says how many
        values["required_nodes"] = len(values["nodes"])
        origins["required_nodes"] = origins["nodes"]

    def get(key: str) -> Any:
        if key not in values:
            origins[key] = DEFAULT
        return values.get(key, props[key].get("default"))

    mods: tuple[Mod, ...] = ()
    if m.mods_from is not None:
        # recipes/<id>/recipe.toml: the project is two folders up from the recipe's own
        project_mods = (recipes_dir.parent if recipes_dir is not None else path.parent.parent.parent) / "mods"
        mods = load_mods(m.mods_from[0], m.mods_from[1], m.mods_from[0].data["mods"], project_mods)
    transport = values.get("mods_transport", "auto")
    mods_in_image = _mods_in_image(transport, mods, m.mods_from, values.get("docker_image_dir"))
    engine = values["engine"]
    entrypoint = values.get("entrypoint") or ENGINE_DEFAULT_ENTRYPOINT[engine]
    origins.setdefault("entrypoint", DEFAULT)
    return Recipe(
        id=recipe_id, path=path, engine=engine, name=values.get("name", recipe_id),
        docker_image=values["docker_image"], docker_image_dir=values.get("docker_image_dir"),
        image_dir_base=m.image_dir_base, model=values["model"],
        required_nodes=get("required_nodes"), nodes=tuple(values["nodes"]) if "nodes" in values else None,
        tensor_parallel_size=get("tensor_parallel_size"),
        pipeline_parallel_size=get("pipeline_parallel_size"), distributed_backend=get("distributed_backend"),
        shm_size=get("shm_size"), entrypoint=tuple(entrypoint), args=m.args,
        mounts=tuple(m.mounts), env=m.env, dockerfile=values.get("dockerfile"), build_args=m.build_args,
        mods=mods, mods_transport=transport, mods_in_image=mods_in_image, setup=m.setup, ray_args=m.ray_args,
        container=m.container,
        pass_env=tuple(m.pass_env), unused_removals=tuple(m.unused), flag_groups=tuple(group_flags(m.args)),
        origins=origins, bench=bench_table(merged(m.bench_tables)),
        env_origins=m.env_origins, build_arg_origins=m.build_arg_origins, documents=tuple(chain))


def _mods_in_image(transport: str, mods: tuple[Mod, ...], mods_from: tuple[TomlDocument, str] | None,
                   image_dir: str | None) -> bool:
    """Whether the mods travel in a derived image (generator/resolve/mods.py); its refusals at the `mods` element."""
    if mods_from is None:
        return False

    def at(i: int, message: str) -> RecipegenError:
        return RecipegenError(mods_from[0].diagnostic(("mods", i), message))

    if not in_image(transport, mods, at):
        return False
    if image_dir:
        raise at(0, "mods carried in an image cannot be combined with docker_image_dir (Compose builds one image "
                    "for a service): COPY the mods in that Dockerfile to /workspace/mods/<name> and drop `mods`")
    for i, mod in enumerate(mods):
        why = image_refusal(mod)
        if why:
            raise at(i, why)
    image_context(mods, at)
    return True


def _suggest_id(name: str) -> str:
    import re

    return re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-_") or "my-recipe"


def _load_chain(path: Path, recipes_dir: Path | None, collect: list[Diagnostic] | None = None) -> list[TomlDocument]:
    chain: list[TomlDocument] = []
    seen: dict[Path, TomlDocument] = {}
    current, referrer = path, None
    while True:
        try:
            real = current.resolve()
        except (OSError, RuntimeError) as exc:  # a symlink loop
            raise RecipegenError(Diagnostic(str(current), None, None, None, f"cannot read: {exc}")) from None
        if real in seen:
            names = " -> ".join(d.shown for d in chain) + f" -> {seen[real].shown}"
            raise RecipegenError(chain[-1].diagnostic(("extends",), f"recipes extend each other in a cycle: {names}"))
        if referrer is not None and not current.is_file():
            raise RecipegenError(referrer.diagnostic(("extends",), f"parent recipe '{referrer.data['extends']}' not "
                                                                   f"found (looked for {current})"))
        found: list[Diagnostic] | None = None if collect is None else []
        try:
            doc = load_checked(current, "recipe", found)
        except RecipegenError as exc:
            if referrer is None:
                raise
            raise RecipegenError([replace(d, message=f"{d.message} (parent of {chain[0].shown})")
                                  for d in exc.diagnostics]) from None
        if collect is not None and found:
            collect.extend(found if referrer is None else
                           [replace(d, message=f"{d.message} (parent of {chain[0].shown})") for d in found])
        chain.append(doc)
        seen[real] = doc
        parent = doc.data.get("extends")
        if parent is None:
            return chain
        if "\x00" in parent:  # no path holds one (the OS refuses it: ValueError); validate has collected the
            if collect is not None:  # schema's word on it, a build stops here
                return chain
            raise RecipegenError(doc.diagnostic(("extends",), "contains a NUL character (\\u0000): no path can "
                                                              "hold one"))
        current, referrer = _parent_path(doc.path, parent, recipes_dir), doc


def _parent_path(child: Path, ref: str, recipes_dir: Path | None) -> Path:
    """`extends` names a recipe id (a sibling folder, or one under recipes/) or a path relative to the child."""
    if "/" not in ref and not ref.endswith(".toml"):
        sibling = child.parent.parent / ref / RECIPE_FILE
        if sibling.is_file() or recipes_dir is None:
            return sibling
        return recipes_dir / ref / RECIPE_FILE
    return recipe_file(child.parent / ref)


def load_cluster(path: str | Path) -> Cluster:
    return cluster_from_document(load_checked(Path(path), "cluster"))


def cluster_from_text(text: str, path: Path) -> Cluster:
    """A cluster file about to be written at `path`, checked in memory first."""
    doc = parse_toml(text, path)
    problems = validate_document(doc, "cluster")
    if problems:
        raise RecipegenError(problems)
    return cluster_from_document(doc)


def cluster_from_document(doc: TomlDocument) -> Cluster:
    data = doc.data
    props = schema("cluster")["properties"]

    def get(key: str) -> Any:
        return data.get(key, props[key].get("default"))

    _unique_node_fields(doc)
    nodes = []
    for i, raw in enumerate(data["nodes"]):
        user = raw.get("user", get("user"))
        # The cluster's home belongs to the cluster's user: a node with another user has that user's home.
        home = raw.get("home") or (data.get("home") if user == get("user") else None) or (
            "/root" if user == "root" else f"/home/{user}")
        nodes.append(Node(index=i, name=raw["name"], address=raw["address"], context=raw["context"],
                          ssh_host=raw.get("ssh_host", raw["address"]), user=user, home=home,
                          env={k: env_text(v) for k, v in raw.get("env", {}).items()}))
    # Docker's own spelling of no limit is -1; "unlimited" is what ulimit(1) users write.
    ulimits = {k: -1 if v == "unlimited" else v for k, v in data.get("ulimits", {}).items()}
    return Cluster(
        name=data["name"], path=doc.path, user=get("user"), hf_cache=get("hf_cache"), gpu=get("gpu"),
        rdma=get("rdma"), master_port=get("master_port"), ray_port=get("ray_port"),
        transfer_port=get("transfer_port"), group_port=get("group_port"),
        gpu_memory_ceiling=get("gpu_memory_ceiling"), gpus_per_node=get("gpus_per_node"),
        stop_grace_period=get("stop_grace_period"),
        ulimits=Ulimits(**ulimits),  # its defaults are the schema's
        env={k: env_text(v) for k, v in data.get("env", {}).items()}, nodes=tuple(nodes), document=doc,
        pass_env=tuple(data.get("pass_env", [])),
        ray_args=split_words(doc, data.get("ray_args", []), "cluster", key="ray_args"),
        ray_join_timeout=get("ray_join_timeout"), gpu_memory=size_bytes(get("gpu_memory")) or 0,
        container=ContainerOptions(**{k: data.get(k, props[k].get("default")) for k in CONTAINER_KEYS}),
        router=_router(doc, tuple(nodes)), metrics=load_metrics(doc, tuple(nodes)))


def _router(doc: TomlDocument, nodes: tuple[Node, ...]) -> Router | None:
    """The `[router]` table, its nodes looked up by name (a name the cluster lacks is an error at its place)."""
    raw = doc.data.get("router")
    if raw is None:
        return None
    props = schema("cluster")["properties"]["router"]["properties"]
    known = {n.name: n for n in nodes}
    missing = [doc.diagnostic(("router", "nodes", i), f"the cluster has no node '{name}' (it has "
                                                      f"{', '.join(known)})")
               for i, name in enumerate(raw["nodes"]) if name not in known]
    if missing:
        raise RecipegenError(missing)
    recipes = raw.get("recipes")
    return Router(nodes=tuple(known[name] for name in raw["nodes"]), port=raw.get("port", props["port"]["default"]),
                  recipes=None if recipes is None else tuple(recipes),
                  **{k: raw.get(k, props[k]["default"]) for k in ("image", "max_body", "api_key_env",
                                                                    "health_interval", "timeout")})


def _unique_node_fields(doc: TomlDocument) -> None:
    """Two nodes with one name, fabric address or Docker context are one machine twice: every rank on it would
    bind the same ports (address), or `up` would start two ranks on one engine (context)."""
    problems = []
    for key in ("name", "address", "context"):
        first: dict[str, int] = {}
        for i, raw in enumerate(doc.data["nodes"]):
            value = raw[key]
            if value in first:
                what = "node name" if key == "name" else f"{key}"
                problems.append(doc.diagnostic(("nodes", i, key), f"{what} '{value}' is used twice: by nodes[{i}] "
                                                                  f"'{raw['name']}' and nodes[{first[value]}] "
                                                                  f"'{doc.data['nodes'][first[value]]['name']}'"))
            else:
                first[value] = i
    if problems:
        raise RecipegenError(problems)
