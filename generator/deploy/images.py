"""`recipegen images`: the recipe's image, identical, on every node it uses.

Where the recipe has a build context the image is built on each node lacking it (compose build); otherwise it
is copied from a node that has it: one `docker save` there, fanned out to every target's `docker load` at once
(generator/transfer/images.py says why through this machine). Nodes whose image id already matches the
source's are left alone, so a second run copies nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from generator.deploy.docker import reason
from generator.deploy.targets import Deployment, each


@dataclass(frozen=True)
class ImageResult:
    node: str
    action: str  # "present", "copied from X", "built", "failed"
    image_id: str | None
    error: str | None = None


def sync_images(dep: Deployment) -> list[ImageResult]:
    image = dep.plan.head.image
    ids = each(dep.targets, lambda t: t.docker.image_id(image))
    failed = {n: r for n, r in ids.items() if isinstance(r, BaseException)}
    results: dict[str, ImageResult] = {n: ImageResult(n, "failed", None, reason(e)) for n, e in failed.items()}
    live = [t for t in dep.targets if t.name not in failed]
    if dep.plan.head.build_context:
        todo = [t for t in live if ids[t.name] is None]
        built = each(todo, lambda t: t.docker.compose(str(t.compose_file), "build", timeout=3600))
        for t in live:
            if t in todo:
                err = built[t.name]
                results[t.name] = (ImageResult(t.name, "built", t.docker.image_id(image)) if err is None
                                   else ImageResult(t.name, "failed", None, reason(err)))
            else:
                results[t.name] = ImageResult(t.name, "present", ids[t.name])
        return [results[t.name] for t in dep.targets]
    sources = [t for t in live if ids[t.name]]
    if not sources:
        return [results.get(t.name) or ImageResult(t.name, "failed", None,
                                                   f"{image} is on none of the recipe's nodes and it has no "
                                                   "build context (docker_image_dir)") for t in dep.targets]
    source = sources[0]
    want = ids[source.name]
    todo = [t for t in live if ids[t.name] != want]
    from generator.transfer.images import fan_out

    # one `docker save`, read once, into every target's load at once (not a save per target)
    copied = {n: RuntimeError(e) if e else None for n, e in (fan_out(source, todo, image) if todo else {}).items()}
    how = f"copied from {source.name} (one save through this machine, fanned out to {len(todo)})"
    for t in live:
        if t in todo:
            err = copied[t.name]
            new_id = None if err is not None else t.docker.image_id(image)
            if err is None and new_id != want:
                err = RuntimeError(f"image id after load is {new_id}, expected {want}")
            results[t.name] = (ImageResult(t.name, how, new_id) if err is None
                               else ImageResult(t.name, "failed", None, reason(err)))
        else:
            results[t.name] = ImageResult(t.name, "present", ids[t.name])
    return [results[t.name] for t in dep.targets]
