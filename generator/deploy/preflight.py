"""Before anything starts anywhere: every node answers, has the image, the GPU runtime, the ulimits and the
host paths the ranks need. Checked on all nodes at once; one error means nothing starts."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from concurrent.futures import ThreadPoolExecutor

from generator.deploy import findings as codes
from generator.deploy.contexts import context_finding
from generator.deploy.docker import DockerError, Failure, Refusal, bind_source, reason, refusal
from generator.deploy.findings import Finding, Severity
from generator.deploy.modsimage import mods_image_state
from generator.deploy.names import ENGINE_SERVICE, RECIPE_LABEL, preflight_project
from generator.deploy.port import holder_or_reason
from generator.deploy.requirements import engine_finding, needs_of_files
from generator.deploy.targets import CompiledDeployment, Target, each
from generator.plan.types import NodePlan
from generator.resolve.model import HF_CACHE_IN_CONTAINER
from generator.resolve.modelid import read_model


WILL_BUILD = "compose will build it"


def nothing_built(found: list[Finding]) -> list[Finding]:
    """The findings for a backend that builds no image (Swarm starts tasks from the images the nodes have): an
    image Compose would build is an error there."""
    return [replace(f, severity=Severity.ERROR, fix="recipegen images",
                    message=f.message.replace(WILL_BUILD, "Swarm builds no image: build it on every node first"))
            if f.code == codes.IMAGE_WILL_BUILD else f for f in found]


def preflight(dep: CompiledDeployment) -> list[Finding]:
    """Every node's findings (errors, and notes worth printing), head first; image ids compared across nodes."""
    results = each(dep.targets, lambda t: _check_node(t, dep.node_plan(t), dep.plan.serve_port))
    found: list[Finding] = []
    ids: dict[str, str] = {}
    for target in dep.targets:
        result = results[target.name]
        if isinstance(result, Exception):
            result = ([Finding(target.name, Severity.ERROR, codes.TRIAL_FAILED, f"preflight failed: {reason(result)}")],
                      None)
        found += result[0]
        if result[1]:
            ids[target.name] = result[1]
    if len(set(ids.values())) > 1:
        listing = ", ".join(f"{node}={image_id.split(':')[-1][:12]}" for node, image_id in ids.items())
        found += [Finding(t.name, Severity.ERROR, codes.IMAGE_DIFFERS, f"image {dep.plan.head.base_image} differs "
                          f"across nodes ({listing}): ranks must run the same build", "recipegen images")
                  for t in dep.targets]
    return found


def _check_node(target: Target, plan: NodePlan, port: int) -> tuple[list[Finding], str | None]:
    """One node's findings and the id of its image (None when it has none). On the head: the port it will serve
    on must be free (or already this recipe's own head's)."""
    out: list[Finding] = []

    def add(severity: Severity, code: str, message: str, fix: str = "") -> None:
        out.append(Finding(target.name, severity, code, message, fix))

    for name in plan.pass_env:
        if name not in os.environ:
            add(Severity.WARNING, codes.PASS_ENV_UNSET, f"{name} (pass_env) is not set here: the engine will start "
                                                        "without it")
    try:  # the first call doubles as the "does the context answer" check
        too_old = engine_finding(target.name, needs_of_files([target.compose_file]), target.docker.server_version())
        if too_old:  # the trial below would fail on the feature, with the daemon's words: say the version
            return [*out, too_old], None
        for other in _other_recipes(target, plan.recipe_id):
            add(Severity.ERROR, codes.NODE_BUSY, f"node is busy: recipe '{other}' runs here (one GPU per node; "
                                                 f"`recipegen down {other}` first)")
    except DockerError as exc:
        return [*out, context_finding(target.name, plan.node.context, exc)], None
    if not target.compose_file.is_file():
        add(Severity.ERROR, codes.FILE_MISSING, f"{target.compose_file} is missing: run `recipegen build`")
    try:
        image_id = target.docker.image_id(plan.image)
        mods = mods_image_state(target, plan.mods_image, plan.image) if plan.mods_image is not None else None
    except DockerError as exc:
        add(Severity.ERROR, codes.IMAGE_UNREADABLE, f"cannot inspect image {plan.image}: {exc.short}")
        return out, None
    if mods is not None and not mods.usable:  # compared across nodes by the base it runs or would build from
        base = plan.base_image
        if mods.stale:
            add(Severity.ERROR, codes.IMAGE_STALE, f"the mods' image {plan.image} was built from an older {base} "
                                                   "than this node has now", "recipegen images")
        elif mods.identity is None:
            add(Severity.ERROR, codes.IMAGE_MISSING, f"image {base} (the mods' image is built from it) is not on "
                                                     "this node (load it there, or `recipegen images`)",
                "recipegen images")
        else:
            add(Severity.NOTE, codes.IMAGE_WILL_BUILD, f"the mods' image {plan.image} is not there yet; {WILL_BUILD} "
                                                       f"from {base}")
        return out, mods.identity
    if image_id is None:
        if plan.build_context:
            add(Severity.NOTE, codes.IMAGE_WILL_BUILD, f"image {plan.image} is not there yet; {WILL_BUILD}")
        else:
            add(Severity.ERROR, codes.IMAGE_MISSING, f"image {plan.image} is not on this node (load it there, or "
                                                     "`recipegen images`)", "recipegen images")
        return out, None
    with ThreadPoolExecutor(max_workers=1) as pool:  # the head's port is asked while its trial runs
        taken = pool.submit(_port_taken, target, plan, port) if plan.is_head else None
        trial = _trial_run(target, plan)
        out += [trial] if trial else taken.result() if taken else []
    return out, mods.identity if mods is not None else image_id


def _port_taken(target: Target, plan: NodePlan, port: int) -> list[Finding]:
    """The head listens on the host's network: a port held by anything but this recipe's own head would answer
    the readiness wait in its place (and the engine could not bind it)."""
    holder = holder_or_reason(target, plan.image, port)
    if isinstance(holder, str):
        return [Finding(target.name, Severity.WARNING, codes.PORT_UNCHECKED, f"could not check that port {port} is "
                                                                             f"free: {holder}")]
    if holder is None or (holder.recipe == plan.recipe_id and holder.rank == "0"):
        return []
    return [Finding(target.name, Severity.ERROR, codes.PORT_TAKEN, f"port {port} (the head's --port) is already in "
                                                                   f"use on this node by {holder.describe()}",
                    "stop it, or serve this recipe on another --port")]


# Exit status 3 of the trial container: a model is not in the mounted Hugging Face cache; it prints each missing
# one's folder, one a line, followed by " incomplete" when the folder is there but a snapshot link is dangling
# or a copy left a partial blob (`recipegen models` was cut off). `sh` and `ls` only: any engine image has them.
_MODEL_CHECK = ('missing=0; for m; do found=; for f in "$m"/snapshots/*/config.json "$m"/config.json; do '
                '[ -e "$f" ] && found=1 && break; done; [ -n "$found" ] || { echo "$m"; missing=1; continue; }; '
                'for f in "$m"/snapshots/*/* "$m"/snapshots/*/*/* "$m"/blobs/*.recipegen-partial; do '
                'if [ -L "$f" ] && [ ! -e "$f" ]; then found=; fi; '
                'case "$f" in *.recipegen-partial) [ -e "$f" ] && found=;; esac; done; '
                '[ -n "$found" ] || { echo "$m incomplete"; missing=1; }; done; '
                '[ "$missing" = 0 ] || exit 3')
MODEL_MISSING = 3


def model_dir(model: str) -> str:
    """Where the engine looks for the model inside the container: a path as given, or the hub cache layout."""
    return read_model(model).container_dir(HF_CACHE_IN_CONTAINER)


def _other_recipes(target: Target, mine: str) -> set[str]:
    """Recipes other than this one with a running container on the node."""
    row = f'[{{{{json (.Label "{RECIPE_LABEL}")}}}},{{{{json .State}}}}]'  # a JSON pair a line: no label parsing
    found = set()
    for line in target.docker.run("ps", "-a", "--filter", f"label={RECIPE_LABEL}", "--format", row,
                                  timeout=10).splitlines():
        recipe, state = json.loads(line) if line.strip() else ("", "")
        if recipe and recipe != mine and state in ("running", "restarting", "created"):
            found.add(str(recipe))
    return found


def _trial_run(target: Target, plan: NodePlan) -> Finding | None:
    """Run the rank's own compose service (its GPU request, ulimits, shm, devices, mounts: the very file `up`
    starts) with only a look for the model as its command: what would fail at `up` fails here, in a second,
    before any rank starts. Compose creates the read-write mount folders, as it will at `up` (and as a Swarm
    service, which never creates them, needs)."""
    try:
        target.docker.compose(str(target.compose_file), "run", "--rm", "--no-deps", "-T", "--entrypoint", "sh",
                              ENGINE_SERVICE, "-c", _MODEL_CHECK, "sh", *(model_dir(m) for m in plan.models),
                              project=preflight_project(plan.recipe_id), timeout=180)
    except DockerError as exc:
        if exc.returncode == MODEL_MISSING:
            lines = exc.stdout.splitlines()
            incomplete = {line.removesuffix(" incomplete") for line in lines if line.endswith(" incomplete")}
            missing = set(lines) | incomplete
            named = [m for m in plan.models if model_dir(m) in missing] or [plan.model]
            return Finding(target.name, Severity.ERROR, codes.MODEL_MISSING, "; ".join(
                _missing_text(plan, m, model_dir(m) in incomplete) for m in named), models_fix(plan, named))
        if exc.failure in (Failure.UNREACHABLE, Failure.NO_CONTEXT, Failure.TIMEOUT):
            return context_finding(target.name, plan.node.context, exc)
        return _explain_trial(exc, target.name, plan)
    return None


def _host_model_dir(plan: NodePlan, model: str | None = None) -> str:
    inside = model_dir(model or plan.model)
    for volume in plan.volumes:
        if inside.startswith(volume.target + "/"):
            return volume.source + inside[len(volume.target):]
    return f"{inside} (inside the container)"


def _missing_text(plan: NodePlan, model: str, incomplete: bool) -> str:
    what = "model" if model == plan.model else "draft model"
    if read_model(model).hub_id is None:
        return f"{what} {model} (a path in the container, not a Hugging Face id) is not there: looked in " \
               f"{_host_model_dir(plan, model)}"
    return (f"{what} {model} is {'incomplete in' if incomplete else 'not in'} this node's Hugging Face cache: "
            f"looked in {_host_model_dir(plan, model)}")


def models_fix(plan: NodePlan, models: list[str] | None = None) -> str:
    if all(read_model(m).hub_id is None for m in models or [plan.model]):
        return "put it on the node and mount its folder (`extra_mounts`); `recipegen models` copies hub ids only"
    return f"`recipegen models {plan.recipe_id}` copies it from a node that has it"


def _hf_cache(plan: NodePlan) -> str | None:
    return next((v.source for v in plan.volumes if v.target == HF_CACHE_IN_CONTAINER), None)


def _explain_trial(exc: DockerError, node: str, plan: NodePlan) -> Finding:
    """What a refused trial container means for the rank (docker.refusal read the daemon's error)."""
    cache = _hf_cache(plan)
    why = refusal(exc)

    def found(code: str, message: str, fix: str = "") -> Finding:
        return Finding(node, Severity.ERROR, code, message, fix)

    if why is Refusal.BIND_SOURCE:
        path = bind_source(exc)
        if cache and path.startswith(cache):
            return found(codes.MODEL_MISSING, f"model {plan.model} is not in this node's Hugging Face cache: looked "
                                              f"in {_host_model_dir(plan)} (the cache folder {cache} does not exist)",
                         models_fix(plan))
        return found(codes.HOST_PATH_MISSING, f"host path {path} does not exist on this node (a read-only mount "
                                              "needs it)")
    if why is Refusal.GPU_DRIVER:
        return found(codes.GPU_RUNTIME_MISSING, "no NVIDIA GPU runtime: the engine cannot give containers the GPU",
                     "install the NVIDIA Container Toolkit")
    if why is Refusal.CDI:
        return found(codes.CDI_MISSING, "CDI device nvidia.com/gpu=all is not known to this engine",
                     "generate the CDI spec: nvidia-ctk cdi generate")
    if why is Refusal.ULIMIT:
        return found(codes.ULIMIT_REFUSED, f"ulimits cannot be applied (memlock={plan.ulimits.memlock}): raise the "
                                           "hard limit on the node or lower `[ulimits]` in the cluster file")
    if why is Refusal.RDMA_DEVICE:
        return found(codes.RDMA_MISSING, "no /dev/infiniband on this node although the cluster says rdma = true")
    text = " ".join((exc.stderr or exc.stdout).split())
    return found(codes.TRIAL_FAILED, f"a trial container could not start: {text[-300:]}")
