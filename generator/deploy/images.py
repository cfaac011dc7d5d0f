"""`recipegen images`: the recipe's image, identical, on every node it uses.

Where the recipe has a build context the image is built on each node lacking it (compose build); otherwise it
is copied from a node that has it (`docker save | docker load` across contexts). Nodes whose image id already
matches the source's are left alone, so a second run copies nothing.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from generator.deploy.docker import DockerError, reason
from generator.deploy.targets import Deployment, Target, each


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
    copied = each(todo, lambda t: _copy(source, t, image))
    for t in live:
        if t in todo:
            err = copied[t.name]
            new_id = None if err is not None else t.docker.image_id(image)
            if err is None and new_id != want:
                err = RuntimeError(f"image id after load is {new_id}, expected {want}")
            results[t.name] = (ImageResult(t.name, f"copied from {source.name}", new_id) if err is None
                               else ImageResult(t.name, "failed", None, reason(err)))
        else:
            results[t.name] = ImageResult(t.name, "present", ids[t.name])
    return [results[t.name] for t in dep.targets]


def _copy(source: Target, target: Target, image: str) -> None:
    """Stream `docker save` from one node into `docker load` on another, with no file in between."""
    save = subprocess.Popen(source.docker.command("save", image), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        load = subprocess.run(target.docker.command("load", "-q"), stdin=save.stdout, capture_output=True,
                              timeout=3600)
    finally:
        save.stdout.close()
        save_err = save.stderr.read().decode("utf-8", "replace")
        save.wait(timeout=60)
    if save.returncode != 0:
        raise DockerError(source.docker.command("save", image), save.returncode, "", save_err)
    if load.returncode != 0:
        raise DockerError(target.docker.command("load"), load.returncode, load.stdout.decode(), load.stderr.decode())
