"""The size of each node's Swarm launcher, rendered as `build` renders it: what the check stage's stack-argument
rule (generator/check/launch.py) is handed by the entry points, since rendering comes after checking."""

from __future__ import annotations

from generator.resolve.model import Cluster, Recipe


def launcher_sizes(recipe: Recipe, cluster: Cluster) -> list[tuple[str, int]]:
    """(node name, bytes) of each node's stack launcher, rendered as `build` renders it."""
    # Imported on use: `validate` pays for planning and Jinja only for a recipe whose launcher could be too large.
    from generator.plan.nodes import plan_recipe
    from generator.render.templates import render_launcher

    plan = plan_recipe(recipe, cluster, recipe.path.parent, recipe.path.parent / "out")  # paths: not in launchers
    sizes = []
    for node in plan.nodes:
        text = render_launcher(node, inline_files=True)
        sizes.append((node.node.name, len(text.encode("utf-8")) if text else 0))
    return sizes
