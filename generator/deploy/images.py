"""`recipegen images`: the recipe's image, identical, on every node it uses.

Where the recipe has a build context the image is built on each node lacking it (compose build); where its mods
travel in an image (mods_transport), the base image is placed as any image and the mods' image built on each node
lacking it or holding one built from an older base; otherwise the image is copied from a node that has it: node
to node over the fabric addresses, a chain of helper containers (generator/transfer/image_chain.py), and
through this machine (one `docker save` fanned out to each `docker load`, generator/transfer/images.py) for a
node that cannot take part. Each result says which. Nodes whose image id already matches the source's are left
alone, so a second run copies nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from generator.deploy import findings as codes
from generator.deploy.docker import DockerError, Failure, reason
from generator.deploy.findings import Finding, Severity
from generator.deploy.modsimage import ModsImageState, mods_image_state
from generator.deploy.targets import CompiledDeployment, Target, each

BUILD_TIMEOUT = 3600.0


@dataclass(frozen=True)
class ImageResult:
    node: str
    action: str  # "present", "copied from X node to node (...)", "copied from X through this machine (why)",
    # "built", "failed"
    image_id: str | None
    finding: Finding | None = None  # why it failed
    bytes: int = 0  # copied
    seconds: float = 0.0


def _failed(node: str, code: str, message: str) -> ImageResult:
    return ImageResult(node, "failed", None, Finding(node, Severity.ERROR, code, message))


def _unreadable(target: Target, exc: Exception) -> ImageResult:
    """The node could not say whether it has the image: docker's own words are the message."""
    unreachable = isinstance(exc, DockerError) and exc.failure in (Failure.UNREACHABLE, Failure.NO_CONTEXT,
                                                                   Failure.TIMEOUT)
    return _failed(target.name, codes.CONTEXT_UNREACHABLE if unreachable else codes.IMAGE_UNREADABLE, reason(exc))


def sync_images(dep: CompiledDeployment) -> list[ImageResult]:
    head = dep.plan.head
    if head.mods_image is not None:
        results = _sync_mods_image(dep)
    else:
        results = _sync(dep, head.image, build=bool(head.build_context))
    return [results[t.name] for t in dep.targets]


def _sync(dep: CompiledDeployment, image: str, build: bool) -> dict[str, ImageResult]:
    """`image` on every node: built where missing (build), else copied from a node that has it."""
    ids = each(dep.targets, lambda t: t.docker.image_id(image))
    results: dict[str, ImageResult] = {t.name: _unreadable(t, r) for t in dep.targets
                                       if isinstance(r := ids[t.name], Exception)}
    live = [t for t in dep.targets if t.name not in results]
    present = {t.name: i for t in live if isinstance(i := ids[t.name], str)}
    if build:
        results.update(_build(image, [t for t in live if t.name not in present]))
    elif not present:
        for t in live:
            results[t.name] = _failed(t.name, codes.IMAGE_NOWHERE, f"{image} is on none of the recipe's nodes and it "
                                                                   "has no build context (docker_image_dir)")
    else:
        source = next(t for t in live if t.name in present)
        want = present[source.name]
        todo = [t for t in live if present.get(t.name) != want]
        results.update(_copy(source, todo, image, want, dep.cluster.transfer_port))
    for t in live:
        results.setdefault(t.name, ImageResult(t.name, "present", present.get(t.name)))
    return results


def _build(image: str, todo: list[Target]) -> dict[str, ImageResult]:
    """Compose builds the image on each node of todo, from that node's compose file (the context travels through
    the Docker API)."""
    built = each(todo, lambda t: t.docker.compose(str(t.compose_file), "build", timeout=BUILD_TIMEOUT))
    results = {}
    for t in todo:
        err = built[t.name]
        results[t.name] = (_failed(t.name, codes.IMAGE_BUILD_FAILED, reason(err)) if isinstance(err, Exception)
                           else ImageResult(t.name, "built", t.docker.image_id(image)))
    return results


def _sync_mods_image(dep: CompiledDeployment) -> dict[str, ImageResult]:
    """The mods' image (mods_transport) on every node: the base image first, copied node to node as any image,
    then the mods' image built on each node lacking it or holding one built from an older base. Built, not copied:
    what travels is the mods' folder (Compose's build context), and the base, the large part, is already there."""
    head = dep.plan.head
    spec = head.mods_image
    assert spec is not None
    states = each(dep.targets, lambda t: mods_image_state(t, spec, head.image))
    results: dict[str, ImageResult] = {t.name: _unreadable(t, r) for t in dep.targets
                                       if isinstance(r := states[t.name], Exception)}
    live = [t for t in dep.targets if t.name not in results]
    todo = [t for t in live if not (isinstance(state := states[t.name], ModsImageState) and state.usable)]
    if todo:
        base = _sync(dep, spec.base, build=False)
        results.update({t.name: base[t.name] for t in todo if base[t.name].finding is not None})
        ready = [t for t in todo if t.name not in results]
        built = _build(head.image, ready)
        for t in ready:  # say how the base came, when it had to
            how = base[t.name].action
            results[t.name] = (replace(built[t.name], action=f"built (its base {how})") if how != "present"
                               and built[t.name].finding is None else built[t.name])
    for t in live:
        results.setdefault(t.name, ImageResult(t.name, "present", t.docker.image_id(head.image)))
    return results


def _copy(source: Target, todo: list[Target], image: str, want: str, port: int) -> dict[str, ImageResult]:
    """The image from source to every node of todo (generator/transfer/image_chain.py chooses the path); each
    target's result, its image id checked against the source's."""
    from generator.transfer.image_chain import copy_image

    copied = copy_image(source, todo, image, port) if todo else {}
    results = {}
    for t in todo:
        c = copied[t.name]
        error = c.error
        got = None
        if error is None:
            try:
                got = t.docker.image_id(image)
            except DockerError as exc:  # this node's result, not the end of every other node's
                error = f"cannot read the image id after the load: {reason(exc)}"
        if error is None and got != want:
            error = f"image id after load is {got}, expected {want}"
        results[t.name] = (_failed(t.name, codes.IMAGE_COPY_FAILED, f"{c.how}: {error}") if error
                           else ImageResult(t.name, c.how, got, None, c.bytes, c.seconds))
    return results
